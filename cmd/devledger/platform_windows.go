package main

import (
	"errors"
	"os"
	"os/exec"

	"golang.org/x/sys/windows"
)

// What differs between the systems devledger builds for. The daemon
// serves a Linux node; the tools that read a ledger file run wherever an
// operator reads a copy of one.

// The access modes accessible checks, as unix numbers them; access is
// never asked here (the daemon does not run).
const (
	accessRead   = 4
	accessWrite  = 2
	accessSearch = 1
)

// access is the daemon's check, which does not run here.
func access(path string, mode uint32) error {
	return errors.New("no access check on windows")
}

// terminalColumns is the width of the console window f writes to, less
// one column, 0 when it does not say: the console wraps as soon as a line
// fills its last column, and the newline after a line cut to the full
// width would leave a blank line under it.
func terminalColumns(f *os.File) int {
	var info windows.ConsoleScreenBufferInfo
	if err := windows.GetConsoleScreenBufferInfo(windows.Handle(f.Fd()), &info); err != nil {
		return 0
	}
	return int(info.Window.Right - info.Window.Left)
}

// inOwnGroup, terminateGroup and killGroup are the demo's, which does
// not run here.
func inOwnGroup(cmd *exec.Cmd)     {}
func terminateGroup(p *os.Process) { p.Kill() }
func killGroup(p *os.Process)      { p.Kill() }
