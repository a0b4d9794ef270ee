package hosts

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// openAll starts a lab of inv's hosts and waits for all of them.
func openAll(ctx context.Context, inv *inventory.Inventory, o Options) (*Lab, []HostState, error) {
	lab, settled, err := Start(ctx, inv, o)
	if err != nil {
		return nil, nil, err
	}
	return lab, Collect(inv.Hosts, settled), nil
}

// A lab of local hosts runs whatever ~/.ssh/config holds, even a file that
// cannot be read; a remote host is then refused, naming the file.
func TestOpenLocalIgnoresSSHConfig(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte("Host *\n  NoSuchKey x\nMatch exec \"true\"\n  User x\n"), 0o600)
	lab, states, err := openAll(t.Context(), &inventory.Inventory{Hosts: []inventory.Host{{Name: "here", Local: true, GPUs: []int{0}, SlotsPerGPU: 1}}}, Options{Keepalive: fast.Heartbeat, Grace: fast.Grace, LockDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Close()
	if usable, _ := lab.Usable(); len(usable.Hosts) != 1 {
		t.Fatalf("states %+v", states)
	}
	remote, states, err := openAll(t.Context(), &inventory.Inventory{Hosts: []inventory.Host{{Name: "remote", GPUs: []int{0}, SlotsPerGPU: 1}}}, Options{Keepalive: fast.Heartbeat, Grace: fast.Grace, LockDir: t.TempDir()})
	if err == nil {
		// OpenSSH's ssh -G reads the file host by host: the host is left out.
		defer remote.Close()
		err = states[0].Err
	}
	if err == nil || !strings.Contains(err.Error(), filepath.Join(home, ".ssh", "config")) {
		t.Errorf("a remote host with a broken ssh_config: err = %v", err)
	}
}

func TestSetUnknownHost(t *testing.T) {
	t.Parallel()
	_, err := (&Lab{}).Run(context.Background(), "nowhere", executor.Command{Script: "true"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "nowhere: not a host of this run") {
		t.Fatalf("err = %v", err)
	}
}
