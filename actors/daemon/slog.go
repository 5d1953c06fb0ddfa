package daemon

import (
	"context"
	"log/slog"
)

// quieter wraps zerolog's slog handler for protoactor-go's logs, so the
// daemon writes one stream in one format. protoactor's Info lines (mailbox
// and supervision chatter) become Debug: the daemon logs what matters.
type quieter struct{ slog.Handler }

func lower(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool {
	return q.Handler.Enabled(ctx, lower(l))
}

func (q quieter) Handle(ctx context.Context, r slog.Record) error {
	r.Level = lower(r.Level)
	return q.Handler.Handle(ctx, r)
}

func (q quieter) WithAttrs(as []slog.Attr) slog.Handler { return quieter{q.Handler.WithAttrs(as)} }

func (q quieter) WithGroup(name string) slog.Handler { return quieter{q.Handler.WithGroup(name)} }
