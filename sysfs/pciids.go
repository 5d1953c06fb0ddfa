package sysfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jaypipes/pcidb"
)

// pciIDsLocations are where distributions install the PCI ID database,
// relative to the search root, in the order jaypipes/pcidb searches them.
var pciIDsLocations = []string{
	"usr/share/hwdata/pci.ids",
	"usr/share/misc/pci.ids",
	"usr/share/hwdata/pci.ids.gz",
	"usr/share/misc/pci.ids.gz",
}

// errNoPCIIDs is returned by findPCIIDs when no database file exists.
var errNoPCIIDs = errors.New("no pci.ids found")

// idDB holds the names a scan needs from the PCI ID database, keyed for
// lookups that allocate nothing.
type idDB struct {
	vendors    map[string]string // "8086"
	devices    map[idPair]string // {"8086", "1592"}
	subclasses map[string]string // "0200"
}

type idPair struct{ vendor, device string }

// names returns the vendor and device names of a function, "" for what the
// database does not know.
func (db *idDB) names(vendor, device string) (string, string) {
	if db == nil || vendor == "" {
		return "", ""
	}
	v := db.vendors[vendor]
	if device == "" {
		return v, ""
	}
	return v, db.devices[idPair{vendor, device}]
}

// findPCIIDs picks the database file: the explicit path when one is given
// (it must exist), else the first of pciIDsLocations under searchRoot.
//
// We search ourselves rather than through pcidb's discovery because pcidb
// always looks in $HOME/.cache/pci.ids first (its cache-path option is not
// honoured) and reads PCIDB_* environment variables: both would make tests
// depend on the host. pcidb is then handed the one path we chose.
func findPCIIDs(path, searchRoot string) (string, error) {
	if path != "" {
		st, err := os.Stat(path)
		if err != nil {
			return "", fmt.Errorf("pci.ids %s: %w", path, err)
		}
		if !st.Mode().IsRegular() {
			return "", fmt.Errorf("pci.ids %s: not a regular file", path)
		}
		return path, nil
	}
	for _, loc := range pciIDsLocations {
		p := filepath.Join(searchRoot, loc)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w under %s (looked in %s)", errNoPCIIDs, searchRoot, strings.Join(pciIDsLocations, ", "))
}

// loadPCIIDs parses the database at path with pcidb, network fetching
// disabled whatever PCIDB_ENABLE_NETWORK_FETCH says: a node daemon must not
// download anything. pcidb's parser indexes lines without checking their
// length and panics on some malformed files; that is turned into an error
// here, since a bad pci.ids must never stop discovery.
func loadPCIIDs(path string) (db *idDB, err error) {
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, fmt.Errorf("parse pci.ids %s: malformed (%v)", path, p)
		}
	}()
	noFetch := false
	raw, err := pcidb.New(
		pcidb.WithPath(path),
		&pcidb.WithOption{EnableNetworkFetch: &noFetch},
	)
	if err != nil {
		return nil, fmt.Errorf("load pci.ids %s: %w", path, err)
	}
	db = &idDB{
		vendors:    make(map[string]string, len(raw.Vendors)),
		devices:    make(map[idPair]string, len(raw.Products)),
		subclasses: make(map[string]string, 64),
	}
	for id, v := range raw.Vendors {
		if v != nil {
			db.vendors[strings.ToLower(id)] = v.Name
		}
	}
	for _, p := range raw.Products {
		if p != nil {
			db.devices[idPair{strings.ToLower(p.VendorID), strings.ToLower(p.ID)}] = p.Name
		}
	}
	for id, c := range raw.Classes {
		if c == nil {
			continue
		}
		for _, s := range c.Subclasses {
			if s != nil {
				db.subclasses[strings.ToLower(id+s.ID)] = s.Name
			}
		}
	}
	if len(db.vendors) == 0 {
		return nil, fmt.Errorf("load pci.ids %s: no vendors in it", path)
	}
	return db, nil
}
