package actortest

import (
	"bytes"
	"strings"
	"sync"
)

// Log is a log writer an actor writes and a test reads.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Count is the number of lines logged at level ("" for any) that contain
// substr.
func (l *Log) Count(level, substr string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, substr) && (level == "" || strings.Contains(line, `"level":"`+level+`"`)) {
			n++
		}
	}
	return n
}
