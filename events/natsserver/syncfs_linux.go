package natsserver

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// groupCommit: on Linux the store's writes are made durable by Astro, one
// syncfs(2) for every append waiting (see Config.SyncAlways).
const groupCommit = true

// syncStore flushes every write of the file system that holds dir: the
// stream's blocks, whichever they are, and the directory entries of new
// ones, without knowing JetStream's file layout.
func syncStore(dir *os.File) error {
	if err := unix.Syncfs(int(dir.Fd())); err != nil {
		return fmt.Errorf("natsserver: syncfs %s: %w", dir.Name(), err)
	}
	return nil
}
