// Package actors holds devledger's supervised actors (scanner, pool
// allocators, registrar, socket watcher, health checker), their messages and
// the wiring of the daemon. Actors own all mutable state; they persist an
// event to the ledger, then apply it, then reply.
package actors
