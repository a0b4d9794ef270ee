package inventory

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Watch reports each settled change once, with the inventory or why it
// does not load, and nothing for a rewrite with the same contents.
func TestWatch(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lab.yaml")
	write := func(s string) {
		t.Helper()
		// Write to a new file and rename it over, as editors do.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	const one = "ssh_config: none\nhosts:\n  - {name: a, local: true, gpus: 1}\n"
	const two = "ssh_config: none\nhosts:\n  - {name: a, local: true, gpus: 1}\n  - {name: b, local: true, gpus: 2}\n"
	write(one)
	first, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	type change struct {
		inv *Inventory
		err error
	}
	changes := make(chan change, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	write(two) // before Watch starts: still an edit of what was loaded
	go Watch(ctx, path, first.Digest, 20*time.Millisecond, func(inv *Inventory, err error) { changes <- change{inv, err} })
	next := func() change {
		t.Helper()
		select {
		case c := <-changes:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("no change reported")
			return change{}
		}
	}
	if c := next(); c.err != nil || len(c.inv.Hosts) != 2 {
		t.Fatalf("after adding b: %+v", c)
	}
	write("hosts: [\n")
	if c := next(); c.err == nil || !strings.Contains(c.err.Error(), "lab.yaml") {
		t.Fatalf("a broken edit: %+v, want an error naming the file", c)
	}
	write(two) // back to what loaded last: still a change from the broken file
	if c := next(); c.err != nil || len(c.inv.Hosts) != 2 {
		t.Fatalf("mended: %+v", c)
	}
	write(two) // the same bytes again
	select {
	case c := <-changes:
		t.Errorf("a rewrite with the same contents was reported: %+v", c)
	case <-time.After(200 * time.Millisecond):
	}
}
