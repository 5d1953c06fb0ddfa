package scanner

import (
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/sysfs"
)

// Rescan asks the scanner to scan now (a uevent, an operator's request, a
// test's trigger). Each is one scan; one that comes while a scan's changes
// are being recorded waits for them, so that it diffs against them.
// Removed are the functions the kernel said it removed: one the scan finds
// went and came back (its VFs made anew) and is recorded removed first.
type Rescan struct {
	Reason  string
	Removed []string
}

// Scanned is sent to the scanner's parent after every scan whose events are
// durable: the full list of functions found, sorted by address. Changed is
// false when the scan found nothing new (the parent may skip work then).
type Scanned struct {
	Devices []sysfs.Device
	Changed bool
	Reason  string
	// HealthSet are the devices whose health this scan's events set in
	// the ledger (a device discovered, back, or removed), as the ledger
	// has them now: Healthy, HealthReason and HealthSeq.
	HealthSet map[string]events.Device
}
