package connlimit

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// At the cap, a new connection closes the oldest one that has not been
// trusted; when every open one is trusted, the new one is closed instead.
func TestEvictsOldestUntrusted(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		trusted []bool // of the connections opened before the last
		closed  int    // which one the last closes: -1 the last itself
	}{
		{"none trusted: the oldest goes", []bool{false, false, false}, 0},
		{"the oldest trusted: the next goes", []bool{true, false, false}, 1},
		{"only the newest untrusted", []bool{true, true, false}, 2},
		{"all trusted: the newcomer goes", []bool{true, true, true}, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l := New(inner, len(tt.trusted))
			defer l.Close()
			accepted := make(chan net.Conn, 8)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- c
				}
			}()
			var clients []net.Conn
			dial := func() net.Conn {
				c, err := net.Dial("tcp", inner.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				clients = append(clients, c)
				return c
			}
			for _, trust := range tt.trusted {
				dial()
				s := <-accepted
				if trust {
					Trust(Context(context.Background(), s))
				}
			}
			last := dial()
			if tt.closed >= 0 {
				<-accepted
			}
			for i, c := range clients {
				want := i == tt.closed || (tt.closed < 0 && c == last)
				if got := closedByPeer(c); got != want {
					t.Errorf("connection %d: closed %v, want %v", i, got, want)
				}
			}
			if n := l.Open(); n != len(tt.trusted) {
				t.Errorf("%d open, want the cap, %d", n, len(tt.trusted))
			}
		})
	}
}

// closedByPeer reports whether the server side of c was closed: a read
// ends at once, rather than waiting.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF || (err != nil && !isTimeout(err))
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A closed connection gives its place back.
func TestCloseFreesPlace(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(inner, 2)
	defer l.Close()
	go net.Dial("tcp", inner.Addr().String())
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if l.Open() != 1 {
		t.Fatalf("%d open, want 1", l.Open())
	}
	c.Close()
	c.Close() // twice is harmless
	if l.Open() != 0 {
		t.Errorf("%d open after close, want 0", l.Open())
	}
}
