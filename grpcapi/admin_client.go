package grpcapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"

	"github.com/devledger/devledger/events"
)

// ReadRecordsFromAdmin reads the ledger of the daemon serving the admin
// socket at socketPath: fn gets each record with sequence from or later, as
// events.Unmarshal takes it, in order. rec is reused: it is valid only
// until fn returns. Memory stays flat however long the ledger is: records
// are read off the connection one at a time.
//
// An error from fn stops the read and is returned as is. The daemon's own
// failure arrives after the records read before it, as an error carrying
// its text; a stream cut before its trailer is an error wrapping
// io.ErrUnexpectedEOF. ctx bounds the whole read. With no daemon behind
// socketPath the error wraps fs.ErrNotExist (no socket file) or
// syscall.ECONNREFUSED (a stale one).
func ReadRecordsFromAdmin(ctx context.Context, socketPath string, from uint64, fn func(rec []byte) error) error {
	fail := func(err error) error {
		return fmt.Errorf("read ledger through admin socket %s: %w", socketPath, err)
	}
	resp, err := adminGet(ctx, socketPath, "/v1/records?from="+strconv.FormatUint(from, 10))
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if err := adminAnswerOK(resp, RecordsContentType); err != nil {
		return fail(err)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var buf []byte
	for {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fail(cutShort(err))
		}
		if n == 0 {
			break
		}
		if n > MaxAdminRecord {
			return fail(fmt.Errorf("a record of %d bytes: at most %d expected", n, MaxAdminRecord))
		}
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return fail(cutShort(err))
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
	var t adminTrailer
	if err := json.NewDecoder(io.LimitReader(br, 64<<10)).Decode(&t); err != nil {
		return fail(fmt.Errorf("unreadable trailer: %w", cutShort(err)))
	}
	if !t.OK {
		return fail(fmt.Errorf("the daemon reported: %s", t.Error))
	}
	return nil
}

// BackupFromAdmin copies the ledger of the daemon serving the admin socket
// at socketPath to w: a consistent copy, read in one transaction while the
// daemon runs on. It returns the bytes copied; a copy cut short (fewer
// bytes than the daemon announced) is an error wrapping
// io.ErrUnexpectedEOF.
func BackupFromAdmin(ctx context.Context, socketPath string, w io.Writer) (int64, error) {
	fail := func(err error) error {
		return fmt.Errorf("back up the ledger through admin socket %s: %w", socketPath, err)
	}
	resp, err := adminGet(ctx, socketPath, "/v1/backup")
	if err != nil {
		return 0, fail(err)
	}
	defer resp.Body.Close()
	if err := adminAnswerOK(resp, BackupContentType); err != nil {
		return 0, fail(err)
	}
	if resp.ContentLength < 0 {
		return 0, fail(errors.New("the answer has no length"))
	}
	n, err := io.Copy(w, resp.Body)
	if err == nil && n != resp.ContentLength {
		err = fmt.Errorf("%d of %d bytes: %w", n, resp.ContentLength, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return n, fail(err)
	}
	return n, nil
}

// SnapshotFromAdmin reads the newest snapshot at or before sequence
// atOrBefore (0: the newest) from the daemon serving the admin socket at
// socketPath; false when the daemon has none there.
func SnapshotFromAdmin(ctx context.Context, socketPath string, atOrBefore uint64) (events.State, bool, error) {
	fail := func(err error) (events.State, bool, error) {
		return events.State{}, false, fmt.Errorf("read a snapshot through admin socket %s: %w", socketPath, err)
	}
	resp, err := adminGet(ctx, socketPath, "/v1/snapshot?at="+strconv.FormatUint(atOrBefore, 10))
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode == http.StatusNotFound && mt == "application/json" {
		return events.State{}, false, nil // a daemon of an older version answers in text
	}
	st, err := readSnapshotAnswer(resp)
	if err != nil {
		return fail(err)
	}
	return st, true, nil
}

// ErrExactSnapshotUnsupported is SnapshotAtFromAdmin's error for a
// daemon that cannot answer for the snapshot at one sequence: one older
// than GET /v1/snapshot?exact=1, which ignores exact.
var ErrExactSnapshotUnsupported = errors.New("the daemon cannot answer for the snapshot at one sequence (an older devledger)")

// ErrSnapshotDamaged is what an UnreadableSnapshotError of kind
// SnapshotDamaged is (errors.Is).
var ErrSnapshotDamaged = errors.New("damaged snapshot")

// UnreadableSnapshotError is the daemon's answer that the snapshot at Seq
// is there but it cannot read it: errors.Is finds events.ErrSnapshotFormat
// in one of Kind SnapshotNewerFormat, ErrSnapshotDamaged in one of Kind
// SnapshotDamaged. Its text is the daemon's, as the store says it of the
// file.
type UnreadableSnapshotError struct {
	Seq    uint64
	Kind   string
	Reason string
}

func (e *UnreadableSnapshotError) Error() string { return e.Reason }

func (e *UnreadableSnapshotError) Is(target error) bool {
	return target == events.ErrSnapshotFormat && e.Kind == SnapshotNewerFormat ||
		target == ErrSnapshotDamaged && e.Kind == SnapshotDamaged
}

// SnapshotAtFromAdmin reads the snapshot at sequence seq, and no other,
// from the daemon serving the admin socket at socketPath; false when the
// daemon has none there. One there the daemon cannot read is an
// *UnreadableSnapshotError saying why. A daemon older than this call
// answers the newest it reads at or before seq: a snapshot at seq is
// still that one, but anything else (an older one, or none) is an error
// wrapping ErrExactSnapshotUnsupported, as it cannot tell none from one
// it cannot read.
func SnapshotAtFromAdmin(ctx context.Context, socketPath string, seq uint64) (events.State, bool, error) {
	fail := func(err error) (events.State, bool, error) {
		return events.State{}, false, fmt.Errorf("read the snapshot at #%d through admin socket %s: %w", seq, socketPath, err)
	}
	resp, err := adminGet(ctx, socketPath, "/v1/snapshot?at="+strconv.FormatUint(seq, 10)+"&exact=1")
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusUnprocessableEntity {
		var t adminTrailer
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = json.Unmarshal(body, &t)
		switch {
		case resp.StatusCode == http.StatusNotFound && t.Kind == SnapshotNone:
			return events.State{}, false, nil
		case resp.StatusCode == http.StatusNotFound:
			return fail(ErrExactSnapshotUnsupported)
		case t.Kind == SnapshotNewerFormat, t.Kind == SnapshotDamaged:
			return events.State{}, false, &UnreadableSnapshotError{Seq: seq, Kind: t.Kind, Reason: t.Error}
		}
		return fail(fmt.Errorf("%s: %q", resp.Status, body))
	}
	if resp.StatusCode == http.StatusNotImplemented {
		return fail(fmt.Errorf("%w: %w", ErrExactSnapshotUnsupported, adminAnswerOK(resp, "")))
	}
	st, err := readSnapshotAnswer(resp)
	if err != nil {
		return fail(err)
	}
	if st.Seq != seq {
		return fail(fmt.Errorf("%w: it answered the snapshot at #%d", ErrExactSnapshotUnsupported, st.Seq))
	}
	return st, true, nil
}

// readSnapshotAnswer reads the snapshot a 200 answer of GET /v1/snapshot
// carries, or the daemon's error.
func readSnapshotAnswer(resp *http.Response) (events.State, error) {
	if err := adminAnswerOK(resp, "application/json"); err != nil {
		return events.State{}, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxAdminRecord+1))
	if err != nil {
		return events.State{}, err
	}
	return events.UnmarshalState(body)
}

// ReadStatusFromAdmin asks the daemon serving the admin socket at
// socketPath for its status.
func ReadStatusFromAdmin(ctx context.Context, socketPath string) (AdminStatus, error) {
	var st AdminStatus
	fail := func(err error) (AdminStatus, error) {
		return AdminStatus{}, fmt.Errorf("read status through admin socket %s: %w", socketPath, err)
	}
	resp, err := adminGet(ctx, socketPath, "/v1/status")
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if err := adminAnswerOK(resp, "application/json"); err != nil {
		return fail(err)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&st); err != nil {
		return fail(fmt.Errorf("unreadable answer: %w", err))
	}
	return st, nil
}

// AdminListening says whether a process accepts connections on the admin
// socket at socketPath (nil when one does): a running daemon, however
// slow its actors are to answer /v1/status. The records and snapshots it
// serves need none of them.
func AdminListening(ctx context.Context, socketPath string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return fmt.Errorf("admin socket %s: %w", socketPath, err)
	}
	return c.Close()
}

// AcknowledgeDamageThroughAdmin asks the daemon serving the admin socket
// at socketPath to record an operator's acknowledgement of the damage
// recorded in its ledger, with note; it returns the problems acknowledged.
func AcknowledgeDamageThroughAdmin(ctx context.Context, socketPath, note string) ([]string, error) {
	fail := func(err error) ([]string, error) {
		return nil, fmt.Errorf("acknowledge ledger damage through admin socket %s: %w", socketPath, err)
	}
	body, err := json.Marshal(DamageAcknowledgement{Note: note})
	if err != nil {
		return fail(err)
	}
	resp, err := adminDo(ctx, socketPath, http.MethodPost, "/v1/damage/acknowledge", body)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if err := adminAnswerOK(resp, "application/json"); err != nil {
		return fail(err)
	}
	var ans DamageAcknowledgement
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&ans); err != nil {
		return fail(err)
	}
	return ans.Problems, nil
}

// adminGet sends one GET over the unix socket. Each call has its own
// transport and no keep-alive: tools make a call or two, and nothing is
// left open behind them.
func adminGet(ctx context.Context, socketPath, target string) (*http.Response, error) {
	return adminDo(ctx, socketPath, http.MethodGet, target, nil)
}

func adminDo(ctx context.Context, socketPath, method, target string, body []byte) (*http.Response, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
		DisableKeepAlives:  true,
		DisableCompression: true,
	}
	// The host is a placeholder: the dialer ignores it.
	req, err := http.NewRequestWithContext(ctx, method, "http://devledger"+target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	return (&http.Client{Transport: tr}).Do(req)
}

// adminAnswerOK checks that resp is a 200 of the wanted media type, and
// otherwise turns the daemon's error answer into an error.
func adminAnswerOK(resp *http.Response, wantType string) error {
	if resp.StatusCode != http.StatusOK {
		var t adminTrailer
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if json.Unmarshal(body, &t) == nil && t.Error != "" {
			return fmt.Errorf("%s: %s", resp.Status, t.Error)
		}
		return fmt.Errorf("%s: %q", resp.Status, body)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != wantType {
		return fmt.Errorf("answer of type %q, want %q: not a devledger admin socket?", resp.Header.Get("Content-Type"), wantType)
	}
	return nil
}

// cutShort reports a body that ended early as io.ErrUnexpectedEOF: within
// the frames, a clean EOF is still a stream cut before its trailer.
func cutShort(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("stream ended before its trailer: %w", io.ErrUnexpectedEOF)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("stream ended before its trailer: %w", err)
	}
	return err
}
