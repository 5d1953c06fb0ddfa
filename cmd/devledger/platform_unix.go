//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// What differs between the systems devledger builds for. The daemon
// serves a Linux node; the tools that read a ledger file run wherever an
// operator reads a copy of one.

// The access modes accessible checks.
const (
	accessRead   = unix.R_OK
	accessWrite  = unix.W_OK
	accessSearch = unix.X_OK
)

// access says whether this process may use path with mode, as the kernel
// decides it for its effective user.
func access(path string, mode uint32) error {
	return unix.Faccessat(unix.AT_FDCWD, path, mode, unix.AT_EACCESS)
}

// terminalColumns is the width of the terminal f is, 0 when it does not
// say.
func terminalColumns(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// inOwnGroup starts cmd in a process group of its own, which no
// terminal signals.
func inOwnGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// terminateGroup asks the process group p leads to stop (SIGTERM), and
// continues it: a stopped process acts on SIGTERM only once continued.
func terminateGroup(p *os.Process) {
	syscall.Kill(-p.Pid, syscall.SIGTERM)
	syscall.Kill(-p.Pid, syscall.SIGCONT)
}

// killGroup kills the process group p leads.
func killGroup(p *os.Process) { syscall.Kill(-p.Pid, syscall.SIGKILL) }
