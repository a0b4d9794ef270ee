package spawn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// Bootstrap's line runs the code sent first on stdin, byte for byte, with
// the name as $0 and the arguments after it; ExitStatus reads how it ended.
func TestLocalBootstrap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code     string
		args     []string
		wantOut  string
		wantCode int
	}{
		{code: `printf '%s|%s\n' "$0" "$*"`, args: []string{"t-1.2"}, wantOut: "gpd-test|t-1.2\n"},
		{code: "printf 'ü \\\\ \"$x\"'; exit 3", wantOut: `ü \ "$x"`, wantCode: 3},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		p, err := Local(context.Background(), Bootstrap(tt.code, "gpd-test", tt.args...), &out, &out)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(p.Stdin, tt.code)
		p.Stdin.Close()
		code, ok := ExitStatus(p.Wait())
		if !ok || code != tt.wantCode || out.String() != tt.wantOut {
			t.Errorf("%q: exit %d (%v), output %q; want %d, %q", tt.code, code, ok, out.String(), tt.wantCode, tt.wantOut)
		}
	}
	if _, ok := ExitStatus(errors.New("connection lost")); ok {
		t.Error("ExitStatus found a status in an error without one")
	}
}
