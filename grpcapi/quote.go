package grpcapi

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/status"
)

// What a client of a pool's socket sends reaches errors, log lines and the
// ledger. Anything root on the node can dial the socket, and kubelets have
// bugs, so what is quoted of it is bounded: a message up to 4 MiB never
// makes a line, a status message or a record of that size.

// MaxQuotedID is the most of a device ID that a message quotes. A real one,
// a PCI address or an auxiliary device name, is far shorter.
const MaxQuotedID = 256

// maxListedIDs is how many device IDs IDList names before it counts the
// rest.
const maxListedIDs = 16

// MaxReason is the most of the reason given to NotifyRegistrationStatus
// that a pool's server logs or passes on, and of the text of the answer to
// a Register or a PodResources List that RegisterWithKubelet or
// PodResourcesClient.List returns. The kubelet gives a few texts of its
// own with the socket path (at most 107 bytes), the resource name (at
// most 317) or an error of its device manager naming the socket: a few
// hundred bytes.
const MaxReason = 1024

// clip cuts s to its first max bytes (at a character boundary) and returns
// the note that says how long it was, or s whole and "".
func clip(s string, max int) (string, string) {
	if len(s) <= max {
		return s, ""
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], fmt.Sprintf("… (%d bytes)", len(s))
}

// QuoteID is id quoted as %q quotes it; past MaxQuotedID bytes, its first
// ones quoted and its length: "0000:3b"… (4194304 bytes).
func QuoteID(id string) string {
	s, note := clip(id, MaxQuotedID)
	return strconv.Quote(s) + note
}

// IDList joins device IDs with commas for a message, each cut as QuoteID
// cuts it (unquoted), and names only the first 16: "a,b,… and 3 more".
// A real Allocate names as many devices as a container asks for: the
// first 16 tell an operator which request it was.
func IDList(ids []string) string {
	var b strings.Builder
	for i, id := range ids {
		if i == maxListedIDs {
			fmt.Fprintf(&b, " and %d more", len(ids)-i)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		s, note := clip(id, MaxQuotedID)
		b.WriteString(s + note)
	}
	return b.String()
}

// reason is a reason a client gave, cut to MaxReason bytes with its length
// noted.
func reason(why string) string {
	s, note := clip(why, MaxReason)
	return s + note
}

// clippedStatus is err as a gRPC status of the same code, its message cut
// as reason cuts it: the answer of a server on a socket we dial.
func clippedStatus(err error) *status.Status {
	return status.New(status.Code(err), reason(status.Convert(err).Message()))
}
