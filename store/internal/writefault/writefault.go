// Package writefault carries the one seam between package store and its
// test helpers (storetest) that the store's exported API does not offer:
// a ledger whose writes fail as a full disk fails them. Being internal,
// only packages under store/ can reach it.
package writefault

import "github.com/devledger/devledger/events"

// Set, installed by package store, makes the write transactions of log
// (a *store.Log) fail with err, and write nothing, until it is called
// again with a nil err. A nil refuse fails every one; otherwise only
// those it returns true for, called once per transaction, one at a time,
// with the events the transaction appends (nil for a snapshot, a
// retention pass or a repair).
var Set func(log any, err error, refuse func(appended []events.Envelope) bool)
