package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// tokenPrefix starts a k3s "secure" token: K10<sha256 of the server CA>::server:<secret>.
const tokenPrefix = "K10"

// caHash is the token's CA pin: the hex SHA-256 of the server CA certificate PEM.
func caHash(caPEM []byte) string {
	sum := sha256.Sum256(caPEM)
	return hex.EncodeToString(sum[:])
}

// secretOf returns the secret part of a token, which is either a bare secret or a
// full K10 token; for a full token it also returns its CA hash.
func secretOf(token string) (secret, hash string, err error) {
	if !strings.HasPrefix(token, tokenPrefix) || !strings.Contains(token, "::") {
		return token, "", nil
	}
	hash, creds, _ := strings.Cut(strings.TrimPrefix(token, tokenPrefix), "::")
	user, secret, ok := strings.Cut(creds, ":")
	if !ok || user == "" || secret == "" {
		return "", "", errors.New("token has the K10 prefix but not the form K10<hash>::<user>:<secret>")
	}
	return secret, hash, nil
}

// ensureToken makes <data-dir>/server/token agree with the token file, as k3s does:
// the first start stores K10<ca hash>::server:<secret>; a later start with a
// different secret is refused, because everything the cluster wrote is bound to
// the original one. Without a token file the stored token is kept, or a random
// one is made on the first start. Errors never contain a token.
func ensureToken(serverDir, tokenFile string, caPEM []byte) error {
	storedPath := filepath.Join(serverDir, "token")
	wantHash := caHash(caPEM)

	var given string
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return fmt.Errorf("reading token-file: %w", err)
		}
		if given = strings.TrimSpace(string(b)); given == "" {
			return fmt.Errorf("token-file %s is empty", tokenFile)
		}
	}
	givenSecret, givenHash, err := secretOf(given)
	if err != nil {
		return fmt.Errorf("token-file %s: %w", tokenFile, err)
	}
	if givenHash != "" && givenHash != wantHash {
		return fmt.Errorf("token-file %s pins a CA hash that does not match this server's CA (%s)", tokenFile, filepath.Join(serverDir, "tls", "server-ca.crt"))
	}

	stored, err := os.ReadFile(storedPath)
	switch {
	case err == nil:
		storedSecret, _, err := secretOf(strings.TrimSpace(string(stored)))
		if err != nil {
			return fmt.Errorf("%s: %w", storedPath, err)
		}
		if givenSecret != "" && givenSecret != storedSecret {
			return fmt.Errorf("the token in token-file %s does not match the token this server was created with (%s): "+
				"k3s refuses to start with a different token; restore the original token", tokenFile, storedPath)
		}
		return linkNodeToken(serverDir)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("reading stored token: %w", err)
	}

	if givenSecret == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		givenSecret = hex.EncodeToString(b)
	}
	full := fmt.Sprintf("%s%s::server:%s\n", tokenPrefix, wantHash, givenSecret)
	if err := writeFileAtomic(storedPath, []byte(full), 0o600); err != nil {
		return err
	}
	return linkNodeToken(serverDir)
}

// linkNodeToken makes server/node-token point at server/token, as in k3s.
func linkNodeToken(serverDir string) error {
	link := filepath.Join(serverDir, "node-token")
	if target, err := os.Readlink(link); err == nil && target == "token" {
		return nil
	}
	_ = os.Remove(link)
	return os.Symlink("token", link)
}
