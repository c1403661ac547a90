package publisher

import (
	"errors"
	"strings"
)

// ParseServerToken extracts, from the token file k3s keeps at
// <data-dir>/server/token, the token it was started with.
//
// k3s writes the file as "K10<sha256 of the CA>::server:<password>", where the
// password is the value of --token-file; k3s's token format also allows a bearer
// token without a user in place of "server:<password>". A file holding anything
// else is taken to be the bare value. The error never contains any part of the file.
func ParseServerToken(data []byte) (string, error) {
	s := strings.TrimSpace(string(data))
	if s == "" {
		return "", errors.New("server token file is empty")
	}
	if !strings.HasPrefix(s, "K10") {
		return s, nil
	}
	_, creds, ok := strings.Cut(s, "::")
	if !ok {
		return s, nil // a bare token that happens to start with K10
	}
	// The credentials are "<user>:<password>", or a bearer token without a colon.
	if _, password, ok := strings.Cut(creds, ":"); ok {
		creds = password
	}
	if creds == "" {
		return "", errors.New("server token file has no credentials after its K10<hash>:: prefix")
	}
	return creds, nil
}
