package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parseTimeFlag reads a point in time given as RFC 3339 ("2026-11-24T09:00:00Z",
// or with a space for the "T", as `date --rfc-3339` writes it), as a date
// (the start of that UTC day), or as a duration before now ("2h", "90m",
// "7d"). The point is in UTC, as every time the tools print, whatever zone
// it was given in or the reading machine is in.
func parseTimeFlag(name, value string, now time.Time) (time.Time, error) {
	if t, err := parseRFC3339(time.RFC3339Nano, value); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, value); err == nil {
		return t, nil
	}
	if d, err := parseAge(value); err == nil {
		return now.Add(-d).UTC(), nil
	}
	if err := zoneless(name, value); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, usageErrf("--%s %q: want an RFC 3339 time (2026-11-24T09:00:00Z), a UTC date (2026-11-24) or a duration before now (2h, 90m, 7d)", name, value)
}

// zoneless is the usage error for value, given to --name, when it is a
// time with no zone; nil when it is anything else.
func zoneless(name, value string) error {
	if _, err := parseRFC3339("2006-01-02T15:04:05.999999999", value); err == nil {
		return usageErrf("--%s %q: a time with no zone is no point in time: add Z for UTC (%sZ) or the offset (%s+01:00)", name, value, value, value)
	}
	return nil
}

// parseRFC3339 is time.Parse of a layout of RFC 3339's, which lets a time
// write its "T" and "Z" in lowercase, and a space for the "T" (RFC 3339,
// 5.6), where Go's layout does not.
func parseRFC3339(layout, value string) (time.Time, error) {
	value = strings.ToUpper(value)
	if len(value) > len(time.DateOnly) && value[len(time.DateOnly)] == ' ' {
		value = value[:len(time.DateOnly)] + "T" + value[len(time.DateOnly)+1:]
	}
	return time.Parse(layout, value)
}

// parseUntilFlag is parseTimeFlag for a point that events at or before it
// fall in (--until, --until-time, the ends of --diff): a time written to
// the second stands for the whole of that second, as the tools print
// event times to the second, and a date for the whole of that UTC day. A
// time copied from their output so keeps the events of its second. A
// fraction, after a "." or a "," (time.Parse takes both, as ISO 8601
// does), is taken as written.
func parseUntilFlag(name, value string, now time.Time) (time.Time, error) {
	t, err := parseTimeFlag(name, value, now)
	if err == nil && !strings.ContainsAny(value, ".,") {
		if _, perr := parseRFC3339(time.RFC3339, value); perr == nil {
			t = t.Add(time.Second - time.Nanosecond)
		} else if _, perr := time.Parse(time.DateOnly, value); perr == nil {
			t = t.Add(24*time.Hour - time.Nanosecond)
		}
	}
	return t, err
}

// givenAt is the time a point parseUntilFlag read was given as: the
// second itself for a whole second. Output shows it, and durations run to
// it.
func givenAt(t time.Time) time.Time {
	if t.Nanosecond() == 999_999_999 {
		return t.Truncate(time.Second)
	}
	return t
}

// untilText writes a point parseUntilFlag read as it was given.
func untilText(t time.Time) string { return givenAt(t).UTC().Format(time.RFC3339Nano) }

// parseAge is time.ParseDuration plus a "d" suffix for days. Negative ages
// are refused.
func parseAge(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil {
			return 0, err
		}
		d = time.Duration(n * 24 * float64(time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, err
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %s", s)
	}
	return d, nil
}
