// Package store is devledger's ledger: an append-only log of events.Envelope
// records in one bbolt file, with snapshots of the folded state, retention,
// an integrity check, and a read-only mode for offline tools. It is the only
// package that imports bbolt.
//
// # On disk
//
// One bbolt file with three buckets:
//
//	events     key: the sequence, 8 bytes big-endian (bbolt's byte order is
//	           then sequence order)
//	           value: CRC-32C (Castagnoli), 4 bytes big-endian, computed over
//	           the key and then the record; then the record, as
//	           events.Marshal writes it (it carries the sequence too)
//	snapshots  key: the sequence of the last event the state includes
//	           (events.State.Seq), 8 bytes big-endian
//	           value: CRC-32C over key and record, then the record, as
//	           events.MarshalState writes it (canonical JSON)
//	meta       "kind" = "devledger ledger", "format_version" = "1" (decimal),
//	           "node" = the node name given at creation, "created" = RFC 3339
//	           UTC time of creation; all text, readable with the bbolt CLI
//
// The checksum covers the key so that a record that lands under another key
// (a misdirected write, a page mixed up) fails it like a flipped bit does; a
// record also says its own sequence, which must match its key. The events
// bucket's bbolt sequence counter is the last sequence ever assigned:
// records missing at the end are detected against it.
//
// FormatVersion changes only when this layout does. Event schemas evolve
// inside the records (package events upcasts old versions on read), so old
// ledgers stay readable and are never rewritten. A ledger whose format is
// newer than this build is refused with ErrNewerFormat.
//
// # Guarantees
//
//   - Append returns only after its events are committed with fsync (bbolt
//     commits with two: data pages, then the meta page; NoSync is never
//     set). Nothing is acknowledged that is not on disk, and a call is all or
//     nothing. A process killed at any point loses no acknowledged event; a
//     commit in flight is either wholly there on reopen or not at all.
//   - Sequences start at 1 and are gap-free. They come from the events
//     bucket's NextSequence inside the write transaction, so a failed
//     transaction gives its sequences back.
//   - Group commit by one writer: a goroutine of the Log takes the oldest
//     Append waiting and every other one queued behind it (up to
//     Options.MaxBatch events) into one transaction and one fsync, and
//     answers each call with its own result (see Append). Calls are
//     committed in the order they were made; AppendAsync queues one and
//     answers through a callback, so an actor can go on with its mailbox
//     while its events become durable. AppendGuarded writes a call only if
//     its Guard passes every event committed after the point its caller
//     decided on: a compare-and-append, checked by the writer itself.
//     Sync returns once every call queued before it is answered: a read
//     after it sees what they wrote.
//   - Every read verifies what it returns: checksum, decoding, the sequence
//     in the record, continuity. The first bad record ends the read with a
//     *CorruptError naming its sequence, after everything before it was
//     delivered. Reads never modify the file.
//   - Snapshots bound replay: Replay starts from the newest snapshot at or
//     before the point asked for. Check proves every snapshot equals the fold
//     of the log.
//   - Retention drops only events the newest snapshot already holds, oldest
//     first, and records an EventsDropped event in the same transaction.
//     The file does not shrink (bbolt reuses freed pages); CompactTo writes
//     a copy without them, verified, to put in its place offline.
//
// # Opening
//
// A Log opened for writing holds bbolt's exclusive lock on the file until
// Close; one opened with Options.ReadOnly holds a shared lock, never creates
// the file (ErrNoLedger) and never writes to it. Open always bounds its wait
// for the lock (Options.LockTimeout, then ErrLocked): on a live node the
// daemon holds the lock, and tools read through its admin socket instead. A
// file that is not a ledger (empty, not bbolt, bbolt without devledger's
// meta) is refused with ErrNotLedger before anything could change it. A new
// ledger (mode 0600) is built under a temporary name beside it
// (".NAME.creating-*") and linked into place, so a crash never leaves a
// half-made ledger under NAME, at worst a stray temporary file.
//
// Long reads (Read, Replay, Check) run in one bbolt read transaction. bbolt
// re-maps the file when a writer grows it and must then wait for open read
// transactions, so a slow Read in the daemon can delay an Append that needs
// the file to grow; Read callbacks should not block on slow consumers.
package store
