//go:build !linux

package natsserver

import "os"

// groupCommit: without syncfs(2), JetStream's own sync_always keeps
// Config.SyncAlways's promise, one fsync per append.
const groupCommit = false

func syncStore(*os.File) error { return nil }
