package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/tasks"
)

// applyEncryptTypes marks the listed task types (ENCRYPT_TYPES, "type1,type2") encrypted: their
// payloads, results and checkpoints are kept encrypted at rest with the key ring. It returns a
// copy of list; a type not in it is an error.
func applyEncryptTypes(v string, list []tasks.Task) ([]tasks.Task, error) {
	return eachTaskEntry(v, ",", list, func(out []tasks.Task, typ string) error {
		i := taskIndex(out, typ)
		if i < 0 {
			return fmt.Errorf("%q does not name a task type", typ)
		}
		out[i].Config.Encrypt = true
		return nil
	})
}

// parseKeyRing reads ENCRYPTION_KEYS; the error names the entry and its id, never a key.
func parseKeyRing(v string) (*middleware.KeyRing, error) {
	r, err := middleware.ParseKeyRing(v)
	if err != nil {
		return nil, unwrapAll(err)
	}
	return r, nil
}

// readKeyRingFile reads ENCRYPTION_KEYS_FILE: a missing or unreadable file names its path, a bad
// entry its number and id, never a key.
func readKeyRingFile(path string) (*middleware.KeyRing, error) {
	r, err := middleware.ReadKeyRingFile(path)
	if err != nil {
		return nil, unwrapAll(err)
	}
	return r, nil
}

// unwrapAll keeps an error's text (already free of key material) but not its chain: the chain of
// a key ring error is only texts.
func unwrapAll(err error) error { return errors.New(strings.TrimPrefix(err.Error(), "middleware: ")) }

// EncryptedTypes are the types of list marked encrypted.
func EncryptedTypes(list []tasks.Task) []string {
	var out []string
	for _, t := range list {
		if t.Config.Encrypt {
			out = append(out, t.Type)
		}
	}
	return out
}
