// Package storetest holds ledger helpers for the tests and benchmarks of
// packages other than store:
//
//   - BareUpdater, a bbolt file written with one Update per Put: the
//     baseline a durable ledger append is measured against. Packages other
//     than store may not import bbolt themselves.
//   - PodHistory and Grow, which make a realistic ledger of any size
//     quickly: pods coming and going on a node's pools, with snapshots in
//     place as a daemon leaves them.
//   - NewFullDisk and RefuseWrites, for a node whose disk is full: a
//     small tmpfs of its own to fill, or a ledger made to refuse every
//     write as one would.
package storetest
