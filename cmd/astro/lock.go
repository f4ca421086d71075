package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDataDir keeps a second astro off a data directory that one already
// runs on: two embedded NATS servers on one store would corrupt it. The
// lock is an flock, so it goes away with the process, however it dies.
func lockDataDir(dir string) (release func(), err error) {
	path := filepath.Join(dir, "astro.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is in use by another astro (pid %s); stop it or use another --data-dir", dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}
