package main

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/mattn/go-isatty"
)

// Tables: dump, replay (and its --diff) and dump --stats write their
// tables through one writer. Into a file or a pipe nothing is ever cut:
// what is read there is read whole. On a terminal each line is cut to the
// terminal's width, the cut marked with "…", unless --wide.

// terminalWidth is the width of the terminal w writes to, 0 when w is not
// a terminal. A variable, so that tests can stand in for a terminal.
var terminalWidth = func(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return 0
	}
	if n := terminalColumns(f); n > 0 {
		return n
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 80
}

// tableOut is where a table goes: w, through a line cutter when w is a
// terminal and wide is not asked for. Close writes what is left of a line
// without its newline.
func tableOut(w io.Writer, wide bool) io.WriteCloser {
	width := terminalWidth(w)
	if wide || width <= 0 {
		return nopCloser{w}
	}
	return &lineCutter{w: w, width: width}
}

// columns lays out tab-separated cells in aligned columns, two spaces
// apart.
func columns(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// lineCutter cuts every line written through it to width runes.
type lineCutter struct {
	w     io.Writer
	width int
	line  []byte
}

func (c *lineCutter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			c.line = append(c.line, p...)
			break
		}
		c.line = append(c.line, p[:i]...)
		if err := c.emit(true); err != nil {
			return n - len(p), err
		}
		p = p[i+1:]
	}
	return n, nil
}

func (c *lineCutter) emit(newline bool) error {
	out := truncate(string(c.line), c.width)
	if newline {
		out += "\n"
	}
	c.line = c.line[:0]
	_, err := io.WriteString(c.w, out)
	return err
}

func (c *lineCutter) Close() error {
	if len(c.line) == 0 {
		return nil
	}
	return c.emit(false)
}
