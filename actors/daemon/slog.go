package daemon

import (
	"context"
	"log/slog"

	"github.com/rs/zerolog"
)

// zerologHandler routes protoactor-go's slog output into zerolog, so the
// daemon writes one log stream in one format. protoactor's Info lines
// (mailbox and supervision chatter) become Debug: the daemon logs the state
// changes that matter itself.
type zerologHandler struct {
	log   zerolog.Logger
	attrs []slog.Attr
	group string
}

func (h *zerologHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.log.GetLevel() <= zlevel(l)
}

func zlevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	default:
		return zerolog.DebugLevel
	}
}

func (h *zerologHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.log.WithLevel(zlevel(r.Level))
	add := func(a slog.Attr) bool {
		key := a.Key
		if h.group != "" {
			key = h.group + "." + key
		}
		ev = ev.Str(key, a.Value.String())
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	ev.Msg(r.Message)
	return nil
}

func (h *zerologHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &c
}

func (h *zerologHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.group = name
	return &c
}
