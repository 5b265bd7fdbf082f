// Package install keeps the Slack workspaces pinplan is installed in
// (DESIGN §14): the OAuth v2 flow that installs it, the installations in
// the store with their tokens encrypted under PINPLAN_SECRET_KEY, and
// their refresh when Slack's token rotation is on.
package install

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MinSecretKey is the shortest PINPLAN_SECRET_KEY taken, in bytes.
const MinSecretKey = 32

// ErrWrongKey: a token does not decrypt with the secret key given: the
// key is not the one the installation was stored with (changed, or
// another deployment's), or the record was altered.
var ErrWrongKey = errors.New("the installation's tokens do not decrypt with PINPLAN_SECRET_KEY: it is not the key they were stored with")

// Sealer encrypts tokens at rest with AES-256-GCM under a key derived from
// PINPLAN_SECRET_KEY (HKDF-SHA256), and signs the OAuth flow's state.
type Sealer struct {
	aead cipher.AEAD
	sign []byte // the state's HMAC key
}

// NewSealer derives the keys from secret, which must be at least
// MinSecretKey bytes (generate one with `openssl rand -base64 32`).
func NewSealer(secret string) (*Sealer, error) {
	secret = strings.TrimSpace(secret)
	if len(secret) < MinSecretKey {
		return nil, fmt.Errorf("PINPLAN_SECRET_KEY is %d bytes; it must be at least %d (generate one with: openssl rand -base64 32)", len(secret), MinSecretKey)
	}
	enc, err := hkdf.Key(sha256.New, []byte(secret), nil, "pinplan slack tokens v1", 32)
	if err != nil {
		return nil, err
	}
	sign, err := hkdf.Key(sha256.New, []byte(secret), nil, "pinplan slack oauth state v1", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(enc)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead, sign: sign}, nil
}

// sealedPrefix marks an encrypted value and its format's version.
const sealedPrefix = "v1:"

// Seal encrypts a token; "" stays "". The id is bound into it (as GCM's
// additional data), so a token moved to another installation's record
// does not decrypt there.
func (s *Sealer) Seal(id, token string) string {
	if token == "" {
		return ""
	}
	nonce := make([]byte, s.aead.NonceSize())
	rand.Read(nonce) // never fails (crypto/rand)
	out := s.aead.Seal(nonce, nonce, []byte(token), []byte(id))
	return sealedPrefix + base64.RawStdEncoding.EncodeToString(out)
}

// Open decrypts what Seal made for id: ErrWrongKey when it does not
// decrypt with this key.
func (s *Sealer) Open(id, sealed string) (string, error) {
	if sealed == "" {
		return "", nil
	}
	rest, ok := strings.CutPrefix(sealed, sealedPrefix)
	if !ok {
		return "", fmt.Errorf("an installation's token is not in a format this version reads")
	}
	raw, err := base64.RawStdEncoding.DecodeString(rest)
	if err != nil || len(raw) < s.aead.NonceSize() {
		return "", ErrWrongKey
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(id))
	if err != nil || !utf8.Valid(plain) {
		return "", ErrWrongKey
	}
	return string(plain), nil
}
