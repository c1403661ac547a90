package publisher_test

import (
	"strings"
	"testing"

	"github.com/k3k-io/k3k/pkg/publisher"
)

func TestParseServerToken(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		want    string
		wantErr bool
	}{
		{"the full form k3s writes gives the password", "K10aa11bb22::server:s3cret\n", "s3cret", false},
		{"a password with colons is kept whole", "K10aa11bb22::server:a:b:c", "a:b:c", false},
		{"a bare token is used as it is", "  my-bare-token \n", "my-bare-token", false},
		{"a bare token starting with K10 but without :: is used as it is", "K10nothing", "K10nothing", false},
		{"an empty file is an error", " \n", "", true},
		{"a full form without a password is an error", "K10aa11bb22::server:", "", true},
		{"a full form with a bearer token gives the token", "K10aa11bb22::bearer", "bearer", false},
		{"a full form with nothing after :: is an error", "K10aa11bb22::", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := publisher.ParseServerToken([]byte(tt.file))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseServerToken() = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "aa11bb22") {
				t.Fatalf("error holds the file's content: %v", err)
			}
		})
	}
}
