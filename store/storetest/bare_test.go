package storetest

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestBareUpdaterPutGet(t *testing.T) {
	u := NewBareUpdater(t, t.TempDir())
	for i := range uint64(3) {
		if err := u.Put(binary.BigEndian.AppendUint64(nil, i), []byte{byte(i), 'x'}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := u.Get(binary.BigEndian.AppendUint64(nil, 2))
	if err != nil || !bytes.Equal(got, []byte{2, 'x'}) {
		t.Errorf("Get(2) = %q, %v; want \"\\x02x\"", got, err)
	}
	if got, err := u.Get([]byte("absent")); err != nil || got != nil {
		t.Errorf("Get(absent) = %q, %v; want nil", got, err)
	}
}
