package engine

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/seal"
)

// ErrUndecryptable: a job's payload, result or checkpoint is encrypted and does not open with the
// stack's keys (Config.Keys): the key that sealed it is not in the ring, the ring holds another key
// under its id, or the value was changed. A run that meets it fails for good with this reason.
var ErrUndecryptable = errors.New("engine: job data cannot be decrypted")

// The record's fields that hold a task type's data, sealed when the type is encrypted
// (TaskConfig.Encrypt). Everything else of the record is jobguard's own bookkeeping.
var sealedFields = []string{jobstore.FieldPayload, jobstore.FieldResult, jobstore.FieldCheckpoint}

// sealValue is what job id's field stores of v: v sealed with the current key when tc is
// encrypted and v is not empty (an empty value says nothing but its length), else v.
func sealValue(ring *seal.Ring, tc TaskConfig, id, field string, v []byte) ([]byte, error) {
	if !tc.Encrypt || len(v) == 0 {
		return escapePlain(v), nil
	}
	out, err := ring.Seal(v, seal.AD(id, field))
	if err != nil {
		return nil, fmt.Errorf("engine: encrypt %s of job %s: %w", field, id, err)
	}
	return []byte(out), nil
}

// openValue is v as the handler wrote it: opened when sealed (whatever the type's setting now,
// so turning encryption off leaves old jobs readable), as it is when not.
func openValue(ring *seal.Ring, id, field string, v []byte) ([]byte, error) {
	if plain, ok := bytes.CutPrefix(v, []byte(plainPrefix)); ok {
		return plain, nil
	}
	if !seal.Sealed(string(v)) {
		return v, nil
	}
	out, err := ring.Open(string(v), seal.AD(id, field))
	if err != nil {
		return nil, fmt.Errorf("%w: %s of job %s: %w", ErrUndecryptable, field, id, err)
	}
	return out, nil
}

// plainPrefix marks a stored value that is plaintext although it starts like a sealed value
// (seal.Prefix) or like a marked one: an application's payload, result or checkpoint may be any
// bytes, and one that began with "jgenc:" was read as a sealed value that did not open (the job
// failed for good as undecryptable, Status and GET /jobs/{id} errored). A value of a type that is
// not encrypted is stored as it is unless it starts with either prefix, when it is stored with
// plainPrefix before it; openValue takes the mark off.
const plainPrefix = "jgraw:"

// escapePlain is v as a plaintext value is stored (see plainPrefix).
func escapePlain(v []byte) []byte {
	if !bytes.HasPrefix(v, []byte(seal.Prefix)) && !bytes.HasPrefix(v, []byte(plainPrefix)) {
		return v
	}
	return append([]byte(plainPrefix), v...)
}

func (s *Stack) sealValue(tc TaskConfig, id, field string, v []byte) ([]byte, error) {
	return sealValue(s.cfg.Keys, tc, id, field, v)
}

func (s *Stack) openValue(id, field string, v []byte) ([]byte, error) {
	return openValue(s.cfg.Keys, id, field, v)
}

// Keys is the stack's key ring (nil without one), for the re-encrypt command.
func (s *Stack) Keys() *seal.Ring { return s.cfg.Keys }

// Open returns v with its record's payload, result and checkpoint decrypted; v.Raw keeps what
// Redis (or the SQL copy) stores. Get returns what is stored, so a reader that must not see a
// tenant's data (the monitoring UI) shows it encrypted; the API and Guard.Status call Open.
func (s *Stack) Open(v View) (View, error) {
	id := v.Record.JobID
	p, err := openValue(s.cfg.Keys, id, jobstore.FieldPayload, v.Record.Payload)
	if err != nil {
		return v, err
	}
	r, err := openValue(s.cfg.Keys, id, jobstore.FieldResult, []byte(v.Record.Result))
	if err != nil {
		return v, err
	}
	c, err := openValue(s.cfg.Keys, id, jobstore.FieldCheckpoint, v.Record.Checkpoint)
	if err != nil {
		return v, err
	}
	v.Record.Payload, v.Record.Result, v.Record.Checkpoint = p, string(r), c
	return v, nil
}
