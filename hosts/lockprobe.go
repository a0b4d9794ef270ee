package hosts

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"

	"al.essio.dev/pkg/shellescape"
)

// ProbeLocks fills in which gpudispatch run holds each GPU's lock in dir on
// r's machine. It only tries a shared lock, and lets go of it at once, so it
// never stands in a run's way for longer than that.
func ProbeLocks(ctx context.Context, r Runner, dir string, gpus []executor.GPU) error {
	if len(gpus) == 0 {
		return nil
	}
	var ids []string
	for _, g := range gpus {
		ids = append(ids, strconv.Itoa(g.Index))
	}
	// Prints "INDEX OWNER" for each locked GPU; lock_key names its file
	// exactly as lock.sh does. lock_key is bash: the login shell may not be.
	script := lockKeyScript + `command -v flock >/dev/null || exit 0
d=` + shellescape.Quote(dir) + `
uuids=$(nvidia-smi --query-gpu=index,uuid --format=csv,noheader 2>/dev/null)
for i in ` + strings.Join(ids, " ") + `; do
  lock_key "$i" "$uuids"
  f=$d/$key
  [ -e "$f" ] || continue
  exec 9<"$f" || continue
  flock -n -s 9 || printf '%s %s\n' "$i" "$(head -n 1 "$f")"
  exec 9<&-
done`
	var out, errOut bytes.Buffer
	code, err := r.Run(ctx, executor.Command{Script: "exec bash -c " + shellescape.Quote(script)}, &out, &errOut)
	if err == nil && code != 0 {
		err = fmt.Errorf("looking at GPU locks in %s: exit status %d: %s", dir, code, strings.TrimSpace(errOut.String()))
	}
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out.String(), "\n") {
		index, owner, ok := strings.Cut(line, " ")
		for i := range gpus {
			if ok && strconv.Itoa(gpus[i].Index) == index {
				gpus[i].LockedBy = owner
			}
		}
	}
	return nil
}
