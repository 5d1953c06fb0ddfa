//go:build !unix

package store

// mapRegular reads the file into memory: the syscall package maps no
// files here.
var mapRegular = readRegular
