package fieldmac

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"strconv"
	"testing"
)

// TestSumIsHMACSHA256 pins the reused states to a fresh hmac.New's answer
// over the record's message, across repeated use.
func TestSumIsHMACSHA256(t *testing.T) {
	s := New([]byte("a key"))
	for i := range 4 {
		seq := int64(100 + i)
		m := hmac.New(sha256.New, []byte("a key"))
		m.Write([]byte("2:it3:tok0:0:|" + strconv.FormatInt(seq, 10) + "|7|50"))
		want := m.Sum(nil)[:Size]
		if got := s.Sum([]string{"it", "tok", "", ""}, []int64{seq, 7, 50}); !bytes.Equal(got[:], want) {
			t.Fatalf("use %d: MAC %x, want %x", i, got, want)
		}
	}
}

// TestCheckTakesOnlyItsOwnRecord: a MAC checks for the record and key it was
// made for, and for no other record, key, or mangled encoding.
func TestCheckTakesOnlyItsOwnRecord(t *testing.T) {
	s := New(KeyOf("secret", "purpose a"))
	strs, nums := []string{"item", "tok"}, []int64{4, 1700000000}
	enc := string(s.Append(nil, strs, nums))
	if len(enc) != EncodedLen {
		t.Fatalf("encoded MAC %q is %d long, want %d", enc, len(enc), EncodedLen)
	}
	if !s.Check(enc, strs, nums) {
		t.Fatal("a MAC does not check for its own record")
	}
	if !New(KeyOf("secret", "purpose a")).Check(enc, strs, nums) {
		t.Fatal("a MAC does not check on another signer of the same key")
	}
	other := map[string]bool{
		"another key":     New(KeyOf("secret", "purpose b")).Check(enc, strs, nums),
		"a random key":    Random().Check(enc, strs, nums),
		"another string":  s.Check(enc, []string{"item", "tok2"}, nums),
		"strings shifted": s.Check(enc, []string{"ite", "mtok"}, nums),
		"another number":  s.Check(enc, strs, []int64{3, 1700000000}),
		"truncated":       s.Check(enc[:EncodedLen-1], strs, nums),
		"not base64":      s.Check(enc[:EncodedLen-1]+"*", strs, nums),
		"empty":           s.Check("", strs, nums),
	}
	for name, ok := range other {
		if ok {
			t.Errorf("%s: the MAC checked", name)
		}
	}
}

// BenchmarkSum is one cursor's MAC: reports ns/op and allocs/op.
func BenchmarkSum(b *testing.B) {
	s := Random()
	b.ReportAllocs()
	for i := range b.N {
		s.Sum([]string{"item-1", "0123456789abcdef0123456789abcdef", "g1", "i1"}, []int64{int64(i), 3, 5})
	}
}
