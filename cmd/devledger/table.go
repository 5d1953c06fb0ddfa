package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
)

// Tables: dump, replay (and its --diff) and dump --stats write their
// tables through one writer. Into a file or a pipe nothing is ever cut:
// what is read there is read whole. On a terminal each line is cut to the
// terminal's width, the cut marked with "…", unless --wide. Piped or
// not, a table shows a control character escaped (escaper).

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

// tableOut is where a table goes: w through an escaper, and through a
// line cutter when w is a terminal and wide is not asked for. Close
// writes what is left of a line without its newline.
func tableOut(w io.Writer, wide bool) io.WriteCloser {
	width := terminalWidth(w)
	if wide || width <= 0 {
		return newEscaper(w)
	}
	e := newEscaper(&lineCutter{w: w, width: width})
	e.close = e.w.(io.Closer)
	return e
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

// escaper shows the control characters written through it escaped as Go
// quotes them (\x1b, \u009b), newline and tab excepted, and a byte that
// is no UTF-8 as \xNN. Tables show what sysfs and the PCI ID database
// said, as the ledger keeps it: an interface name is any bytes but '/',
// ':' and white space, and a pod that renamed its VF in its own network
// namespace can hand it back to the host under such a name. Written raw,
// a terminal would obey it (retitle the window, clear the screen, hide
// rows), and a file the table was saved in would do so when shown.
type escaper struct {
	w     io.Writer
	close io.Closer // the writer's, nil when there is none to close
	// part is the start of a character whose rest is in the next write.
	part []byte
	out  []byte
}

func newEscaper(w io.Writer) *escaper { return &escaper{w: w} }

func (e *escaper) Write(p []byte) (int, error) {
	n := len(p)
	if len(e.part) > 0 {
		p = append(e.part, p...)
		e.part = nil
	}
	clean := true
	for _, c := range p {
		if c < ' ' && c != '\n' && c != '\t' || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		if _, err := e.w.Write(p); err != nil {
			return 0, err
		}
		return n, nil
	}
	out := e.out[:0]
	for i := 0; i < len(p); {
		c := p[i]
		if c < utf8.RuneSelf {
			if c < ' ' && c != '\n' && c != '\t' || c == 0x7f {
				out = fmt.Appendf(out, `\x%02x`, c)
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && size == 1 && !utf8.FullRune(p[i:]):
			e.part = append([]byte(nil), p[i:]...)
			i = len(p)
			continue
		case r == utf8.RuneError && size == 1:
			out = fmt.Appendf(out, `\x%02x`, c)
		case r < 0xa0: // C1: 0x80-0x9f
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, p[i:i+size]...)
		}
		i += size
	}
	e.out = out
	if _, err := e.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// Close writes a character left incomplete, escaped byte by byte, and
// closes the writer it writes to, if it has to.
func (e *escaper) Close() error {
	var err error
	if len(e.part) > 0 {
		var out []byte
		for _, c := range e.part {
			out = fmt.Appendf(out, `\x%02x`, c)
		}
		e.part = nil
		_, err = e.w.Write(out)
	}
	if e.close != nil {
		if cerr := e.close.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
