package pgserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// pointerFile, inside DataDir, names the fallback cluster directory.
	pointerFile = "astro-pgdata"
	// fallbackRoot holds clusters whose DataDir the server user cannot reach.
	fallbackRoot = "/var/lib/astro"
	// pgLibDir is where Debian and Ubuntu install each PostgreSQL major.
	pgLibDir = "/usr/lib/postgresql"
)

// FindBinDir returns the directory holding initdb and postgres, chosen as
// Start chooses it: dir itself when set, else the directory of initdb on PATH,
// else the highest-versioned /usr/lib/postgresql/*/bin. The error wraps
// ErrNoBinaries.
func FindBinDir(dir string) (string, error) {
	if dir != "" {
		if hasBinaries(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%w (BinDir %s)", ErrNoBinaries, dir)
	}
	// initdb runs the postgres next to its real path, so PATH symlinks (as
	// in /usr/local/bin) are resolved to keep both from the same install.
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && hasBinaries(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(pgLibDir, "*", "bin"))
	slices.SortFunc(dirs, func(a, b string) int { return slices.Compare(version(b), version(a)) })
	for _, d := range dirs {
		if hasBinaries(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w (searched PATH and %s/*/bin)", ErrNoBinaries, pgLibDir)
}

// version turns /usr/lib/postgresql/9.6/bin into [9 6] for sorting.
func version(binDir string) []int {
	var v []int
	for _, part := range strings.Split(filepath.Base(filepath.Dir(binDir)), ".") {
		n, _ := strconv.Atoi(part)
		v = append(v, n)
	}
	return v
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// runAs returns the credential to run initdb and postgres with: nil (as
// ourselves) unless we are root, which postgres refuses to run as.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var errs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("user %s: %w", name, err))
			continue
		}
		cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// Without supplementary groups the child would keep root's.
		ids, _ := u.GroupIds()
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
		return cred, nil
	}
	return nil, fmt.Errorf("pgserver: running as root, and no user to run postgres as: %w", errors.Join(errs...))
}

// clusterDir returns the directory the cluster for dataDir lives in: dataDir
// itself, unless we are root and the server user cannot reach it (see the
// package doc).
func clusterDir(dataDir string, cred *syscall.Credential, logger *slog.Logger) (string, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("pgserver: data dir: %w", err)
	}
	if cred == nil {
		return abs, nil
	}
	pointer := filepath.Join(abs, pointerFile)
	b, err := os.ReadFile(pointer)
	if err == nil {
		dir := strings.TrimSpace(string(b))
		logger.Info("postgres user cannot reach the data dir; using the fallback cluster", "data_dir", abs, "cluster", dir)
		return dir, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("pgserver: read %s: %w", pointer, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return "", fmt.Errorf("pgserver: create parent of data dir: %w", err)
	}
	if canTraverse(filepath.Dir(abs), cred) {
		return abs, nil
	}

	// A cluster of its own for each data dir made, not one for its path:
	// a data dir deleted and made again (a reset) starts a new log, and
	// the old cluster's checkpoints are of the deleted one. The pointer
	// is what ties the two; an older Astro's, naming the cluster by the
	// path's hash, is read above as any other.
	id := make([]byte, 6)
	_, _ = rand.Read(id) // never fails on supported platforms (crypto/rand docs)
	dir := filepath.Join(fallbackRoot, "pg-"+hex.EncodeToString(id))
	if err := os.MkdirAll(fallbackRoot, 0o755); err != nil {
		return "", fmt.Errorf("pgserver: create %s: %w", fallbackRoot, err)
	}
	// MkdirAll is subject to the umask; the server user must get through.
	if err := os.Chmod(fallbackRoot, 0o755); err != nil {
		return "", fmt.Errorf("pgserver: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("pgserver: create data dir: %w", err)
	}
	if err := os.WriteFile(pointer, []byte(dir+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("pgserver: write %s: %w", pointer, err)
	}
	logger.Info("postgres user cannot reach the data dir; using the fallback cluster", "data_dir", abs, "cluster", dir)
	return dir, nil
}

// canTraverse reports whether cred may search dir and all its parents. It
// reads the mode bits only; ACLs are not consulted.
func canTraverse(dir string, cred *syscall.Credential) bool {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return false
		}
		st := fi.Sys().(*syscall.Stat_t)
		bit := fs.FileMode(0o001)
		switch {
		case st.Uid == cred.Uid:
			bit = 0o100
		case st.Gid == cred.Gid || slices.Contains(cred.Groups, st.Gid):
			bit = 0o010
		}
		if fi.Mode().Perm()&bit == 0 {
			return false
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
}

// ensureCluster runs initdb for dir unless it already holds a cluster. The
// new cluster's role astro has its password from the start, and the
// password is kept in dir: the server listens on loopback, and a cluster
// that trusted connections until secure ran would let any local user in
// as superuser meanwhile.
//
// Any dir holding PG_VERSION is taken for a complete cluster, and initdb
// writes that file first: so initdb runs in a work directory beside dir
// (see initdbWork), and the cluster is renamed into place, with its
// password, only once it is complete. What a killed start left there is
// removed by the next one.
func ensureCluster(ctx context.Context, bin, dir string, cred *syscall.Credential, noSync bool, logger *slog.Logger) error {
	if ok, err := hasCluster(dir); err != nil {
		return err
	} else if ok {
		return fixOwner(dir, cred)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("pgserver: create parent of cluster dir: %w", err)
	}
	lock, err := lockInitdb(dir)
	if err != nil {
		return err
	}
	defer lock.Close() // closing releases the lock
	if ok, err := hasCluster(dir); err != nil {
		return err
	} else if ok { // another start made it while we waited
		return fixOwner(dir, cred)
	}
	work, err := initdbWork(dir, cred, logger)
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	tmp := filepath.Join(work, "cluster")
	pw := newPassword()
	// initdb reads the password as the server user, and refuses a cluster
	// directory that is not empty: the file goes beside it.
	pwfile := filepath.Join(work, "password")
	if err := writeOwned(pwfile, pw+"\n", cred); err != nil {
		return fmt.Errorf("pgserver: password for initdb: %w", err)
	}
	args := []string{"-D", tmp, "-U", "astro", "--auth=scram-sha-256", "--pwfile=" + pwfile, "-E", "UTF8", "--no-locale"}
	if noSync {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), args...)
	cmd.Dir = work // our working directory may be closed to the server user
	// Like postgres, initdb stops when Astro dies; and it holds the lock
	// until it is gone, so that the next start does not remove the work
	// directory while initdb still writes in it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT}
	cmd.ExtraFiles = []*os.File{lock}
	// On SIGTERM initdb removes what it made.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	logger.Info("initialising postgres cluster", "dir", dir, "work_dir", tmp)
	// Pdeathsig fires when the thread that forked exits (see spawn): this
	// one stays ours until initdb is done.
	runtime.LockOSThread()
	out, err := cmd.CombinedOutput()
	runtime.UnlockOSThread()
	if err != nil {
		return fmt.Errorf("pgserver: initdb %s: %w\n%s", tmp, err, strings.TrimSpace(string(out)))
	}

	// The password goes in before the rename: a cluster in place always
	// has the password its role was made with.
	if _, err := keepPassword(tmp, pw); err != nil {
		return err
	}
	if !noSync {
		if err := syncPath(filepath.Join(tmp, passwordFile)); err != nil {
			return err
		}
	}
	// Over a missing or empty dir; a non-empty one was refused by hasCluster.
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("pgserver: move the new cluster into place: %w", err)
	}
	if !noSync {
		return syncPath(parent)
	}
	return nil
}

// hasCluster reports whether dir holds a cluster (made by initdb, then
// renamed in whole; or by an older Astro, which ran initdb in place). It
// refuses a dir that holds something else, which is not ours to remove.
func hasCluster(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, "PG_VERSION"))
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("pgserver: %w", err)
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("pgserver: %w", err)
	case len(entries) > 0:
		return false, fmt.Errorf("pgserver: %s holds no PostgreSQL cluster (no PG_VERSION) and is not empty: move it away to have a new cluster made there", dir)
	}
	return false, nil
}

// lockInitdb takes the lock beside dir that one start at a time holds
// while it makes the cluster, and returns the file holding it.
func lockInitdb(dir string) (*os.File, error) {
	path := filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".initdb.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("pgserver: lock %s: %w", path, err)
	}
	return f, nil
}

// initdbWork returns a new, empty work directory for initdb beside dir,
// on dir's file system so that the cluster moves into place by rename.
// Whatever a killed start left there is removed first: under the lock, no
// initdb runs in it any more.
func initdbWork(dir string, cred *syscall.Credential, logger *slog.Logger) (string, error) {
	work := filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".initdb")
	if _, err := os.Lstat(work); err == nil {
		logger.Info("removing what an interrupted initdb left", "dir", work)
	}
	if err := os.RemoveAll(work); err != nil {
		return "", fmt.Errorf("pgserver: remove what an interrupted initdb left: %w", err)
	}
	if err := os.Mkdir(work, 0o700); err != nil {
		return "", fmt.Errorf("pgserver: create initdb's work dir: %w", err)
	}
	if cred != nil {
		if err := os.Chown(work, int(cred.Uid), int(cred.Gid)); err != nil {
			os.Remove(work)
			return "", fmt.Errorf("pgserver: %w", err)
		}
	}
	return work, nil
}

// writeOwned writes content to a new file at path, 0600 and owned by the
// server user when we are root.
func writeOwned(path, content string, cred *syscall.Credential) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && cred != nil {
		err = os.Chown(path, int(cred.Uid), int(cred.Gid))
	}
	return err
}

// syncPath flushes the file or directory at path to disk.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgserver: sync %s: %w", path, err)
	}
	return nil
}

// fixOwner hands dir's tree to the server user when we are root and it
// belongs to someone else, e.g. after a copy made as root.
func fixOwner(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid == cred.Uid {
		return nil
	}
	err = filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(cred.Uid), int(cred.Gid))
	})
	if err != nil {
		return fmt.Errorf("pgserver: chown cluster to the server user: %w", err)
	}
	return nil
}

// readPIDFile returns the PID (line 1) and port (line 4) of postmaster.pid.
func readPIDFile(path string) (pid, port int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, 0, fmt.Errorf("pid file %s has %d lines", path, len(lines))
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("pid file %s: %w", path, err)
	}
	return pid, port, nil
}

// isPostmaster reports whether pid is a live (not zombie) postgres serving
// dir. postgres runs in its data directory, so its cwd tells which cluster it
// serves; when that is not ours to read, the process name has to do.
func isPostmaster(pid int, dir string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Format: "pid (comm) state ..."; comm may itself contain ")".
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || len(s) < end+3 {
		return false
	}
	comm, state := s[open+1:end], s[end+2]
	if comm != "postgres" && comm != "postmaster" || state == 'Z' || state == 'X' {
		return false
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil || cwd == dir {
		return true
	}
	real, err := filepath.EvalSymlinks(dir)
	return err == nil && cwd == real
}
