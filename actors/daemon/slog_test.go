package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// protoactor's Info lines become Debug, so a daemon at Info level does not
// write them; its warnings come through with their attributes, in zerolog's
// format.
func TestProtoactorLogsGoToZerolog(t *testing.T) {
	for _, tc := range []struct {
		level zerolog.Level
		want  []string // lines, by message
	}{
		{zerolog.InfoLevel, []string{"supervisor gave up"}},
		{zerolog.DebugLevel, []string{"mailbox started", "supervisor gave up"}},
	} {
		t.Run(tc.level.String(), func(t *testing.T) {
			var buf bytes.Buffer
			l := slog.New(quieter{zerolog.NewSlogHandler(zerolog.New(&buf).Level(tc.level))}).With("actor", "pool")
			l.Info("mailbox started", "pid", "p1")
			l.Warn("supervisor gave up", "pid", "p2")
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("wrote %d lines, want %d: %s", len(lines), len(tc.want), buf.String())
			}
			for i, msg := range tc.want {
				if !strings.Contains(lines[i], `"message":"`+msg+`"`) || !strings.Contains(lines[i], `"actor":"pool"`) {
					t.Errorf("line %d = %s, want %q with actor=pool", i, lines[i], msg)
				}
			}
			if tc.level == zerolog.DebugLevel && !strings.Contains(lines[0], `"level":"debug"`) {
				t.Errorf("protoactor's Info line = %s, want it at debug", lines[0])
			}
		})
	}
}
