package natstest

import (
	"sync"
	"syscall"
	"testing"
)

// DiskFull has every write that grows a file in this process fail, as on a
// full disk, until free is called or the test ends. It caps the size of a
// file at one byte (RLIMIT_FSIZE): a write fails with EFBIG where a full
// disk gives ENOSPC, and the JetStream store takes either as a write error.
// The cap is the whole process's, so the test must not run in parallel with
// others, and a process it starts meanwhile inherits the cap.
func DiskFull(t testing.TB) (free func()) {
	t.Helper()
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 1, Max: was.Max}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	free = func() {
		once.Do(func() {
			if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
				t.Errorf("free the disk: %v", err)
			}
		})
	}
	t.Cleanup(free)
	return free
}
