// Package commands owns the write side's shared rules: the application
// error type every layer returns, the caller a command acts for, and Store,
// which loads an aggregate, lets a command decide against it, and appends
// the decided events with optimistic concurrency.
//
// The domain packages below it (notifications, holidays) hold one struct and
// one handler per command. Like events, this tree imports only the standard
// library; the log and snapshot store are interfaces it declares and the
// events/natslog package implements.
package commands
