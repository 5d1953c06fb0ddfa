package grpcapi

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/events"
)

// The admin socket lets offline tools read a live node: while the daemon
// runs, bbolt's file lock keeps them from opening the ledger, so they ask
// the daemon over <state-dir>/admin.sock (0600, HTTP/1.1; no gRPC because
// there is no protoc in the build).
//
// GET /v1/records?from=N streams the ledger's records with sequence N and
// later (N absent or 0: from the oldest kept). The answer is 200 with
// Content-Type RecordsContentType, and the body is a series of frames:
//
//	frame   = uvarint(length) bytes[length]
//	body    = { frame with length >= 1 } frame with length 0  trailer
//	trailer = one JSON object and "\n": {"ok":true} or {"ok":false,"error":"TEXT"}
//
// Each frame of length >= 1 carries one record, exactly the bytes
// events.Unmarshal takes, in sequence order. The zero-length frame ends the
// records; the trailer says whether they ended because the ledger has no
// more (ok) or because reading failed (the error's text, after the records
// read before the failure). A body that ends before its trailer was cut
// (the daemon stopped or died) and is never a complete dump. A bad query
// is answered 400 with the trailer object as its body.
//
// GET /v1/snapshot?at=N answers 200 with the newest snapshot at or before
// sequence N (N absent or 0: the newest) that the daemon can read, as
// events.MarshalState encodes it (Content-Type application/json), or 404
// with the trailer object when there is none. Once retention dropped the
// oldest events, a fold of the records needs the snapshot at the
// sequence before the first one served.
//
// GET /v1/snapshot?at=N&exact=1 asks for the snapshot at sequence N and
// no other: 200 with it, as above; 404 with the trailer object and
// "kind":"none" when there is none at N; 422 with the trailer object when
// there is one the daemon cannot read, its error saying why and its
// "kind" saying what that is: "newer_format" (a newer devledger wrote it:
// a rollback) or "damaged". A daemon older than exact ignores it and
// answers as without it (SnapshotAtFromAdmin tells).
//
// GET /v1/status answers 200 with an AdminStatus as JSON, or 503 with the
// trailer object when the daemon cannot say.
const (
	// AdminSocketName is the admin socket's file name in the state dir.
	AdminSocketName = "admin.sock"
	// RecordsContentType is the media type of a /v1/records body.
	RecordsContentType = "application/vnd.devledger.records"
	// BackupContentType is the media type of GET /v1/backup: a copy of
	// the ledger file, Content-Length bytes.
	BackupContentType = "application/vnd.devledger.ledger"
	// MaxAdminRecord is the largest record the admin stream carries; a
	// client refuses a longer frame rather than allocate for it.
	MaxAdminRecord = 64 << 20
	// DefaultAdminWriteTimeout bounds each write to an admin client, so a
	// client that stops reading cannot hold a handler forever.
	DefaultAdminWriteTimeout = 30 * time.Second
)

// adminChunkBytes is how much the server reads from the RecordSource
// before it writes to the client. Each read runs in one ledger read
// transaction; writing only between reads keeps a slow client from holding
// a transaction open (a long bbolt read transaction blocks the writer when
// the file must grow), and keeps the server's memory to one chunk.
const adminChunkBytes = 256 << 10

// errChunkFull ends one RecordSource read when a chunk is full.
var errChunkFull = errors.New("chunk full")

// AdminSocketPath returns the admin socket's path in stateDir.
func AdminSocketPath(stateDir string) string {
	return filepath.Join(stateDir, AdminSocketName)
}

// RecordSource reads the ledger's raw records. *store.Log implements it:
// fn gets each record at or after from, in sequence order, valid only until
// fn returns; an error from fn ends the read and is returned. A from older
// than the oldest kept record starts at the oldest.
type RecordSource interface {
	ReadRaw(from uint64, fn func(seq uint64, rec []byte) error) error
}

// BackupSource writes a consistent copy of the ledger file for GET
// /v1/backup and says how long it is. *store.Log implements it.
type BackupSource interface {
	Backup(w io.Writer) (int64, error)
}

// SnapshotSource reads the ledger's snapshots for GET /v1/snapshot.
// *store.Log implements it: the newest readable snapshot at or before
// atOrBefore (0: the newest of all), false when there is none.
type SnapshotSource interface {
	LatestSnapshot(atOrBefore uint64) (events.State, bool, error)
}

// ExactSnapshotSource reads the snapshot at one sequence for GET
// /v1/snapshot?exact=1. *store.Log implements it: false when there is
// none at seq; one there that cannot be read is an error wrapping
// events.ErrSnapshotFormat when a newer devledger wrote it, or one
// AdminServerOptions.SnapshotDamaged tells as damage.
type ExactSnapshotSource interface {
	SnapshotAt(seq uint64) (events.State, bool, error)
}

// The kinds of an answer to GET /v1/snapshot?exact=1 without a snapshot,
// in its trailer object.
const (
	// SnapshotNone: there is no snapshot at the sequence (404).
	SnapshotNone = "none"
	// SnapshotNewerFormat: a newer devledger wrote the snapshot, in a
	// format the daemon does not read (422).
	SnapshotNewerFormat = "newer_format"
	// SnapshotDamaged: the snapshot is damaged (422).
	SnapshotDamaged = "damaged"
)

// DamageAcknowledger takes an operator's acknowledgement of the damage
// recorded in the ledger, for POST /v1/damage/acknowledge (`devledger
// ledger acknowledge`). The daemon implements it beside StatusSource: it
// records the acknowledgement and answers the problems it acknowledged,
// none when there were none.
type DamageAcknowledger interface {
	AcknowledgeDamage(ctx context.Context, note string) ([]string, error)
}

// DamageAcknowledgement is the body of POST /v1/damage/acknowledge, and
// of its answer (the problems acknowledged).
type DamageAcknowledgement struct {
	Note     string   `json:"note,omitempty"`
	Problems []string `json:"problems"`
}

// StatusSource reports the daemon's status for GET /v1/status.
type StatusSource interface {
	Status(ctx context.Context) (AdminStatus, error)
}

// AdminStatus is what GET /v1/status answers.
type AdminStatus struct {
	// Version is the daemon's build version.
	Version string `json:"version"`
	// BootID is the daemon's boot id, as in the envelopes it writes.
	BootID string `json:"boot_id"`
	// Pools lists every pool the daemon serves.
	Pools []AdminPoolStatus `json:"pools"`
}

// AdminPoolStatus is one pool in AdminStatus.
type AdminPoolStatus struct {
	Resource   string `json:"resource"`
	Socket     string `json:"socket"`
	Registered bool   `json:"registered"`
	// Reason is the kubelet's last rejection while not registered.
	Reason string `json:"reason,omitempty"`
	// NoDevices is true for a pool not served because it has no devices
	// (and does not advertiseEmpty): the kubelet is not told of it.
	NoDevices bool `json:"no_devices,omitempty"`
}

// adminTrailer ends a /v1/records body, and is the body of an error answer.
type adminTrailer struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Kind says what Error is, where a client acts on it (SnapshotNone,
	// SnapshotNewerFormat, SnapshotDamaged).
	Kind string `json:"kind,omitempty"`
}

// AdminServerOptions configures an AdminServer; the zero value is usable.
type AdminServerOptions struct {
	// WriteTimeout bounds each write to a client; zero means
	// DefaultAdminWriteTimeout.
	WriteTimeout time.Duration
	Logger       zerolog.Logger
	// SnapshotDamaged says whether an error of ExactSnapshotSource's
	// SnapshotAt is damage to the snapshot (the daemon:
	// errors.Is(err, store.ErrCorrupt)); nil tells none as damage, and
	// such an error is answered 503.
	SnapshotDamaged func(error) bool
}

// AdminServer serves the admin socket. It reads records from a
// RecordSource and status from a StatusSource; its one write is an
// operator's acknowledgement of ledger damage, when the StatusSource is a
// DamageAcknowledger too. Safe for concurrent use.
type AdminServer struct {
	records      RecordSource
	status       StatusSource
	writeTimeout time.Duration
	damaged      func(error) bool
	log          zerolog.Logger
	srv          *http.Server
	// base is every request's parent context; Stop cancels it so that
	// streams end with a trailer instead of keeping Shutdown waiting.
	base       context.Context
	cancelBase context.CancelFunc
	sock       servedSocket
	// spooling makes backups spool one at a time, so that each sees the
	// room the one before it took. A channel of one, not a mutex: a
	// backup waiting for its turn ends with its client, or at Stop.
	spooling chan struct{}
}

// NewAdminServer returns an admin server reading records and status; a nil
// status answers /v1/status with 503.
func NewAdminServer(records RecordSource, status StatusSource, opts AdminServerOptions) *AdminServer {
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultAdminWriteTimeout
	}
	a := &AdminServer{
		records:      records,
		status:       status,
		writeTimeout: opts.WriteTimeout,
		damaged:      opts.SnapshotDamaged,
		log:          opts.Logger.With().Str("component", "admin").Logger(),
		spooling:     make(chan struct{}, 1),
	}
	a.base, a.cancelBase = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/records", a.serveRecords)
	mux.HandleFunc("GET /v1/status", a.serveStatus)
	if snaps, ok := records.(SnapshotSource); ok {
		mux.HandleFunc("GET /v1/snapshot", func(w http.ResponseWriter, r *http.Request) { a.serveSnapshot(w, r, snaps) })
	}
	if b, ok := records.(BackupSource); ok {
		mux.HandleFunc("GET /v1/backup", func(w http.ResponseWriter, r *http.Request) { a.serveBackup(w, r, b) })
	}
	if ack, ok := status.(DamageAcknowledger); ok {
		mux.HandleFunc("POST /v1/damage/acknowledge", func(w http.ResponseWriter, r *http.Request) { a.serveAcknowledge(w, r, ack) })
	}
	a.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return a.base },
		ErrorLog:          log.New(a.log, "", 0),
	}
	return a
}

// Serve creates the socket at socketPath (0600, replacing a stale socket
// file) and serves on it in the background until Stop. It may be called
// once.
func (a *AdminServer) Serve(socketPath string) error {
	_, err := a.sock.listen(socketPath, false, func(lis *privateListener) {
		go func() {
			// Stop closes the listener first: the accept that fails then
			// is the end of serving, not an error.
			if err := a.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) && !a.sock.retired(lis) {
				a.log.Error().Err(err).Str("socket", lis.path).Msg("admin socket stopped serving")
			}
		}()
	})
	if err != nil {
		return fmt.Errorf("serve admin socket: %w", err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(a.Socket()), backupSpoolPattern)); len(left) > 0 {
		for _, f := range left {
			os.Remove(f)
		}
		a.log.Info().Strs("files", left).Msg("removed backup copies a stopped daemon left")
	}
	a.log.Info().Str("socket", a.Socket()).Msg("serving the admin socket")
	return nil
}

// Socket returns the absolute path being served, or "" before Serve.
func (a *AdminServer) Socket() string { return a.sock.socket() }

// Stop stops accepting, removes the socket file (if still this server's),
// ends running streams with an error trailer and waits for handlers until
// ctx ends, then closes their connections. Idempotent.
func (a *AdminServer) Stop(ctx context.Context) error {
	first, lerr := a.sock.stop()
	if !first {
		return nil
	}
	a.cancelBase()
	// Shutdown closes the listener again; that it is closed already is
	// no failure.
	if err := a.srv.Shutdown(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
		a.srv.Close()
		return fmt.Errorf("stop admin socket: %w", err)
	}
	if lerr != nil {
		return fmt.Errorf("stop admin socket: %w", lerr)
	}
	return nil
}

func (a *AdminServer) serveStatus(w http.ResponseWriter, r *http.Request) {
	if a.status == nil {
		writeJSON(w, http.StatusServiceUnavailable, adminTrailer{Error: "status not available"})
		return
	}
	st, err := a.status.Status(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, adminTrailer{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// serveAcknowledge records an operator's acknowledgement of the damage
// recorded in the ledger.
func (a *AdminServer) serveAcknowledge(w http.ResponseWriter, r *http.Request, ack DamageAcknowledger) {
	var req DamageAcknowledgement
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		writeJSON(w, http.StatusBadRequest, adminTrailer{Error: "acknowledge: the body is not a JSON object with a note: " + err.Error()})
		return
	}
	problems, err := ack.AcknowledgeDamage(r.Context(), req.Note)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, adminTrailer{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, DamageAcknowledgement{Note: req.Note, Problems: problems})
}

// backupSpoolPattern names a copy spooled beside the admin socket; one a
// killed daemon left is removed when the next one serves.
const backupSpoolPattern = ".ledger-backup-*"

// backupHeadroom is the room a spooled copy must leave on its disk, the
// ledger's: one step of the ledger's growth (bbolt grows its file 16 MiB
// at a time), so that appends made while the copy is spooled and streamed
// do not fail for want of space.
const backupHeadroom = 16 << 20

// sizedBackup is a BackupSource that says how long its copy will be
// (*store.Log: the file's size, at least the copy's).
type sizedBackup interface {
	SizeBytes() int64
}

// serveBackup streams a copy of the ledger file. The copy is read in one
// transaction, spooled to a file beside the socket (the state dir, on the
// ledger's disk), and streamed from there: the transaction lasts as long
// as the local disk takes, not as long as the client, however slowly it
// reads (kubectl exec through the API server). A long one holds an append
// that must grow the ledger's memory map, and every read queued behind
// that append, the metrics' among them. Every write to the client has the
// write timeout. A copy cut short is shorter than its Content-Length,
// which the client checks.
func (a *AdminServer) serveBackup(w http.ResponseWriter, r *http.Request, b BackupSource) {
	spool, size, err := a.spoolBackup(r.Context(), b)
	if errors.Is(err, errNoRoom) {
		a.log.Warn().Err(err).Msg("backup refused")
		writeJSON(w, http.StatusInsufficientStorage, adminTrailer{Error: err.Error()})
		return
	}
	if err != nil {
		a.log.Warn().Err(err).Msg("backup failed")
		writeJSON(w, http.StatusServiceUnavailable, adminTrailer{Error: err.Error()})
		return
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	w.Header().Set("Content-Type", BackupContentType)
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	n, err := io.Copy(deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: a.writeTimeout}, spool)
	if err != nil {
		a.log.Warn().Err(err).Int64("bytes", n).Int64("of", size).Msg("backup ended early")
		return
	}
	a.log.Info().Int64("bytes", n).Msg("ledger backed up through the admin socket")
}

// errNoRoom refuses a backup whose spooled copy would fill the ledger's
// disk: the daemon's own appends, and every Allocate, would fail until
// the copy went.
var errNoRoom = errors.New("no room for a copy of the ledger")

// spoolBackup copies b into a file beside the socket and returns it, read
// from its start, with its length. A copy that would leave the disk less
// than backupHeadroom is refused (errNoRoom) before a byte is written.
// Waiting for another backup's spool ends with ctx.
func (a *AdminServer) spoolBackup(ctx context.Context, b BackupSource) (*os.File, int64, error) {
	select {
	case a.spooling <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("wait for another backup's copy: %w", ctx.Err())
	}
	defer func() { <-a.spooling }()
	dir := filepath.Dir(a.Socket())
	if sb, ok := b.(sizedBackup); ok {
		free, err := freeBytes(dir)
		if err != nil {
			return nil, 0, fmt.Errorf("spool the copy: %w", err)
		}
		need := uint64(max(sb.SizeBytes(), 0)) + backupHeadroom
		if free < need {
			return nil, 0, fmt.Errorf("%w: spooled in %s it takes %d bytes and must leave %d for the ledger to grow, and %d are free",
				errNoRoom, dir, need-backupHeadroom, backupHeadroom, free)
		}
	}
	spool, err := os.CreateTemp(dir, backupSpoolPattern)
	if err != nil {
		return nil, 0, fmt.Errorf("spool the copy: %w", err)
	}
	size, err := b.Backup(spool)
	if err == nil {
		_, err = spool.Seek(0, io.SeekStart)
	}
	if err != nil {
		spool.Close()
		os.Remove(spool.Name())
		return nil, 0, err
	}
	return spool, size, nil
}

// seqParam reads the sequence number in the query parameter name (0 when
// it is absent); when it is not one, it answers 400 and says false.
func seqParam(w http.ResponseWriter, r *http.Request, name string) (uint64, bool) {
	q := r.URL.Query().Get(name)
	if q == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(q, 10, 64)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, adminTrailer{Error: fmt.Sprintf("%s=%q: want a sequence number", name, q)})
		return 0, false
	}
	return n, true
}

func (a *AdminServer) serveSnapshot(w http.ResponseWriter, r *http.Request, snaps SnapshotSource) {
	at, ok := seqParam(w, r, "at")
	if !ok {
		return
	}
	if q := r.URL.Query().Get("exact"); q != "" {
		exact, err := strconv.ParseBool(q)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, adminTrailer{Error: fmt.Sprintf("exact=%q: want 1 or 0", q)})
			return
		}
		if exact {
			a.serveExactSnapshot(w, snaps, at)
			return
		}
	}
	st, ok, err := snaps.LatestSnapshot(at)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, adminTrailer{Error: err.Error()})
		return
	}
	if !ok {
		writeJSON(w, http.StatusNotFound, adminTrailer{Error: fmt.Sprintf("no snapshot at or before seq %d", at)})
		return
	}
	a.writeSnapshot(w, st)
}

// serveExactSnapshot answers the snapshot at seq and no other, or why
// there is none to answer.
func (a *AdminServer) serveExactSnapshot(w http.ResponseWriter, snaps SnapshotSource, seq uint64) {
	exact, ok := snaps.(ExactSnapshotSource)
	if !ok {
		writeJSON(w, http.StatusNotImplemented, adminTrailer{Error: "this ledger cannot read the snapshot at one sequence"})
		return
	}
	st, ok, err := exact.SnapshotAt(seq)
	switch {
	case errors.Is(err, events.ErrSnapshotFormat):
		writeJSON(w, http.StatusUnprocessableEntity, adminTrailer{Error: err.Error(), Kind: SnapshotNewerFormat})
	case err != nil && a.damaged != nil && a.damaged(err):
		writeJSON(w, http.StatusUnprocessableEntity, adminTrailer{Error: err.Error(), Kind: SnapshotDamaged})
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, adminTrailer{Error: err.Error()})
	case !ok:
		writeJSON(w, http.StatusNotFound, adminTrailer{Error: fmt.Sprintf("no snapshot at seq %d", seq), Kind: SnapshotNone})
	default:
		a.writeSnapshot(w, st)
	}
}

// writeSnapshot answers st, 200.
func (a *AdminServer) writeSnapshot(w http.ResponseWriter, st events.State) {
	body, err := events.MarshalState(st)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, adminTrailer{Error: err.Error()})
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(a.writeTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// deadlineWriter gives every write to a client the write timeout.
type deadlineWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.w.Write(p)
}

func (a *AdminServer) serveRecords(w http.ResponseWriter, r *http.Request) {
	from, ok := seqParam(w, r, "from")
	if !ok {
		return
	}
	w.Header().Set("Content-Type", RecordsContentType)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	err := a.streamRecords(r.Context(), w, rc, from)
	t := adminTrailer{OK: err == nil}
	if err != nil {
		t.Error = err.Error()
		ev := a.log.Warn()
		if a.base.Err() == nil && clientLeft(r, err) {
			// dump --limit, or dump into head: the caller read what it
			// wanted, as it may on every run.
			ev = a.log.Debug()
		}
		ev.Err(err).Uint64("from", from).Msg("record stream ended early")
	}
	body, _ := json.Marshal(t)
	_ = rc.SetWriteDeadline(time.Now().Add(a.writeTimeout))
	if _, err := w.Write(append(append([]byte{0}, body...), '\n')); err == nil {
		_ = rc.Flush()
	}
}

// clientLeft says whether err ended a stream because its client hung up:
// its request's context ended (which the daemon's stop does too), or the
// write met a closed connection.
func clientLeft(r *http.Request, err error) bool {
	return r.Context().Err() != nil || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// streamRecords writes the frames of the records at or after from, a chunk
// at a time, each chunk read in its own RecordSource call (see
// adminChunkBytes). Records appended while it streams are included; records
// dropped by retention between two chunks end the stream with an error
// rather than leave a silent gap.
func (a *AdminServer) streamRecords(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, from uint64) error {
	buf := make([]byte, 0, adminChunkBytes+binary.MaxVarintLen64)
	next, resumed := from, false
	for {
		if a.base.Err() != nil {
			return errors.New("daemon stopping: stream cut short")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		buf = buf[:0]
		var last uint64
		n, full := 0, false
		err := a.records.ReadRaw(next, func(seq uint64, rec []byte) error {
			if resumed && n == 0 && seq != next {
				return fmt.Errorf("record %d was dropped while streaming (the next kept is %d); read again", next, seq)
			}
			if len(rec) == 0 {
				return fmt.Errorf("record %d is empty", seq)
			}
			if len(rec) > MaxAdminRecord {
				return fmt.Errorf("record %d is %d bytes; the admin stream carries at most %d", seq, len(rec), MaxAdminRecord)
			}
			buf = binary.AppendUvarint(buf, uint64(len(rec)))
			buf = append(buf, rec...)
			last, n = seq, n+1
			if len(buf) >= adminChunkBytes {
				full = true
				return errChunkFull
			}
			return nil
		})
		if errors.Is(err, errChunkFull) {
			err = nil
		}
		if len(buf) > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(a.writeTimeout))
			if _, werr := w.Write(buf); werr != nil {
				return fmt.Errorf("write to client: %w", werr)
			}
			if ferr := rc.Flush(); ferr != nil {
				return fmt.Errorf("write to client: %w", ferr)
			}
		}
		if err != nil || !full {
			return err
		}
		next, resumed = last+1, true
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		body, _ = json.Marshal(adminTrailer{Error: err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}
