package natsserver

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkDiskSync: what one durable append costs the disk, JetStream's
// way against PostgreSQL's, in the same run and directory. JetStream's
// file store appends to a block file, so each fsync also makes its new
// size durable (a journal commit on ext4), whether Astro's syncfs or the
// server's own sync_always does it; PostgreSQL writes its commits into
// WAL segments written out in full in advance, so its fdatasync flushes
// data only. "x-preallocated" is the growing file's syncfs over the
// preallocated file's fdatasync: what a durable write costs Astro at
// concurrency 1 over what it costs the CRUD service, before any other
// work.
func BenchmarkDiskSync(b *testing.B) {
	dir := b.TempDir()
	record := make([]byte, 300) // about an event with its headers
	growing := create(b, filepath.Join(dir, "1.blk"))
	store, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	const segment = 16 << 20 // PostgreSQL's WAL segment
	wal := create(b, filepath.Join(dir, "wal"))
	if _, err := wal.Write(make([]byte, segment)); err != nil {
		b.Fatal(err)
	}
	if err := wal.Sync(); err != nil {
		b.Fatal(err)
	}

	var fsync, syncfs, prealloc time.Duration
	timed := func(total *time.Duration, op func() error) {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		*total += time.Since(start)
	}
	b.ResetTimer()
	// Interleaved, so that a change in the machine's load weighs on all
	// three alike.
	for i := range b.N {
		timed(&fsync, func() error {
			if _, err := growing.Write(record); err != nil {
				return err
			}
			return unix.Fdatasync(int(growing.Fd()))
		})
		timed(&syncfs, func() error {
			if _, err := growing.Write(record); err != nil {
				return err
			}
			return syncStore(store)
		})
		timed(&prealloc, func() error {
			if _, err := wal.WriteAt(record, int64(i*len(record))%segment); err != nil {
				return err
			}
			return unix.Fdatasync(int(wal.Fd()))
		})
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(per(fsync), "µs-growing-fdatasync")
	b.ReportMetric(per(syncfs), "µs-growing-syncfs")
	b.ReportMetric(per(prealloc), "µs-preallocated-fdatasync")
	b.ReportMetric(float64(syncfs)/float64(prealloc), "x-preallocated")
}

func create(b *testing.B, path string) *os.File {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}
