// Package writefault carries the one seam between package store and its
// test helpers (storetest) that the store's exported API does not offer:
// a ledger whose writes fail as a full disk fails them. Being internal,
// only packages under store/ can reach it.
package writefault

// Set, installed by package store, makes every write transaction of log
// (a *store.Log) fail with err, and write nothing, until it is called
// again with a nil err.
var Set func(log any, err error)
