// Package seal encrypts job data at rest (payloads, results, checkpoints) with AES-256-GCM and a
// key ring: the current key seals, every key of the ring opens. A sealed value is text, so it fits
// a Redis hash field, a Lua argument and a jsonb string alike:
//
//	jgenc:<base64url, no padding, of: version(1) | len(id)(1) | id | nonce(12) | ciphertext+tag>
//
// The key id rides in each value, so a ring with old keys still opens what they sealed (rotation
// without downtime). The caller's additional data (the job id and the field's name) is
// authenticated: a sealed value moved to another job or field does not open.
//
// Key material never leaves this package: Ring has no exported key field, its String and Format
// print the key ids only, and no error quotes a key.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Prefix starts every sealed value; a value without it is plaintext.
const Prefix = "jgenc:"

// version is the envelope's layout; a value of another version does not open (ErrCorrupt).
const version = 1

// KeySize is the size of a key: AES-256.
const KeySize = 32

const nonceSize = 12

// The errors of opening a value; they name the key id, never the key.
var (
	// ErrUnknownKey: the value was sealed with a key the ring does not hold.
	ErrUnknownKey = errors.New("seal: key not in the key ring")
	// ErrCorrupt: the value does not authenticate with its key (a wrong key under the same id,
	// a value changed or moved to another job or field) or is not an envelope this version reads.
	ErrCorrupt = errors.New("seal: sealed value does not authenticate")
	// ErrNoRing: the value is sealed and no key ring is configured.
	ErrNoRing = errors.New("seal: value is encrypted and no keys are configured")
)

var idRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)

// Ring is a list of keys: the first seals, all of them open. Its zero value and nil hold no key.
type Ring struct {
	ids   []string
	aeads map[string]cipher.AEAD
}

// Key is one key of a ring: an id (1-32 of [A-Za-z0-9._-]) and 32 bytes.
type Key struct {
	ID     string
	Secret []byte
}

// NewRing builds a ring; keys[0] is the current key.
func NewRing(keys ...Key) (*Ring, error) {
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	r := &Ring{aeads: make(map[string]cipher.AEAD, len(keys))}
	for i, k := range keys {
		if !idRe.MatchString(k.ID) {
			return nil, fmt.Errorf("key %d: id must be 1-32 characters of [A-Za-z0-9._-]", i+1)
		}
		if _, dup := r.aeads[k.ID]; dup {
			return nil, fmt.Errorf("key %d: id %q appears twice", i+1, k.ID)
		}
		if len(k.Secret) != KeySize {
			return nil, fmt.Errorf("key %d (id %q): is %d bytes, not %d", i+1, k.ID, len(k.Secret), KeySize)
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("key %d (id %q): %w", i+1, k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("key %d (id %q): %w", i+1, k.ID, err)
		}
		r.ids = append(r.ids, k.ID)
		r.aeads[k.ID] = aead
	}
	return r, nil
}

// Parse reads a ring from "id1:base64key,id0:base64key" (standard base64, padded or not; commas
// or newlines between entries, blank lines and lines starting with '#' skipped): the first entry
// is the current key. Errors name the entry and its id, never its key.
func Parse(spec string) (*Ring, error) {
	var keys []Key
	n := 0
	for _, line := range strings.Split(spec, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, entry := range strings.Split(line, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			n++
			id, b64, ok := strings.Cut(entry, ":")
			if !ok {
				return nil, fmt.Errorf("entry %d: not id:base64key", n)
			}
			if !idRe.MatchString(id) {
				return nil, fmt.Errorf("entry %d: id must be 1-32 characters of [A-Za-z0-9._-]", n)
			}
			secret, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				secret, err = base64.RawStdEncoding.DecodeString(b64)
			}
			if err != nil {
				return nil, fmt.Errorf("entry %d (id %q): key is not standard base64", n, id)
			}
			keys = append(keys, Key{ID: id, Secret: secret})
		}
	}
	return NewRing(keys...)
}

// ParseFile reads a ring from a file in Parse's format (one entry a line, say). The error names
// the file, never its content.
func ParseFile(path string) (*Ring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(string(b))
}

// Current is the id of the key that seals; "" for a ring with no key.
func (r *Ring) Current() string {
	if r == nil || len(r.ids) == 0 {
		return ""
	}
	return r.ids[0]
}

// IDs are the ring's key ids, current first.
func (r *Ring) IDs() []string {
	if r == nil {
		return nil
	}
	return append([]string(nil), r.ids...)
}

// String prints the key ids only.
func (r *Ring) String() string { return "seal.Ring" + fmt.Sprint(r.IDs()) }

// GoString prints the key ids only (%#v).
func (r *Ring) GoString() string { return r.String() }

// Format prints the key ids only, whatever the verb: %v, %+v and %#v of a struct holding a
// Ring never show key material.
func (r *Ring) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(r.String())) }

// Seal encrypts plain with the current key; ad (the job id and field) is authenticated with it.
func (r *Ring) Seal(plain, ad []byte) (string, error) {
	id := r.Current()
	if id == "" {
		return "", ErrNoRing
	}
	aead := r.aeads[id]
	buf := make([]byte, 0, 2+len(id)+nonceSize+len(plain)+aead.Overhead())
	buf = append(buf, version, byte(len(id)))
	buf = append(buf, id...)
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: nonce: %w", err)
	}
	buf = append(buf, nonce...)
	buf = aead.Seal(buf, nonce, plain, ad)
	return Prefix + base64.RawURLEncoding.EncodeToString(buf), nil
}

// Sealed reports whether v is a sealed value (it starts with Prefix).
func Sealed(v string) bool { return strings.HasPrefix(v, Prefix) }

// KeyID is the id of the key that sealed v ("" when v is not a readable envelope).
func KeyID(v string) string {
	id, _, _, err := unpack(v)
	if err != nil {
		return ""
	}
	return id
}

func unpack(v string) (id string, nonce, ct []byte, err error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(v, Prefix))
	if err != nil || len(raw) < 2 || raw[0] != version {
		return "", nil, nil, ErrCorrupt
	}
	n := int(raw[1])
	if n == 0 || len(raw) < 2+n+nonceSize {
		return "", nil, nil, ErrCorrupt
	}
	id = string(raw[2 : 2+n])
	return id, raw[2+n : 2+n+nonceSize], raw[2+n+nonceSize:], nil
}

// Open decrypts v. A value that is not sealed is returned as it is (plaintext written before
// encryption was turned on for its type, or a type that is not encrypted). A sealed value opens
// with the key its id names, or fails: ErrNoRing, ErrUnknownKey or ErrCorrupt, wrapped with the
// key id.
func (r *Ring) Open(v string, ad []byte) ([]byte, error) {
	if !Sealed(v) {
		return []byte(v), nil
	}
	id, nonce, ct, err := unpack(v)
	if err != nil {
		return nil, err
	}
	if r == nil || len(r.ids) == 0 {
		return nil, fmt.Errorf("%w (sealed with key %q)", ErrNoRing, id)
	}
	aead, ok := r.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w: sealed with key %q, the ring holds %v", ErrUnknownKey, id, r.ids)
	}
	plain, err := aead.Open(nil, nonce, ct, ad)
	if err != nil {
		return nil, fmt.Errorf("%w with key %q", ErrCorrupt, id)
	}
	return plain, nil
}

// Stale reports whether v should be sealed again by a ring's current key: it is sealed with
// another key, or it is plaintext (non-empty) and seal says its type is encrypted.
func (r *Ring) Stale(v string, encrypted bool) bool {
	if Sealed(v) {
		return KeyID(v) != r.Current()
	}
	return encrypted && v != ""
}

// AD is the additional data of one field of one record: a sealed value opens only where it was
// written.
func AD(record, field string) []byte { return []byte(record + "\x00" + field) }
