package jobshell

import (
	"os/exec"
	"strings"
	"testing"
)

// A copy is given its reader's saved state in the three parts shell.sh
// cuts it in (functions, aliases and traps, options): splitSaved cuts it
// as that code does, run by bash.
func TestSplitSavedAsTheShell(t *testing.T) {
	t.Parallel()
	start := strings.Index(shellCode, "    _g_opts=\n    case $_g_state in")
	end := strings.Index(shellCode[max(start, 0):], "\n  fi\n")
	if start < 0 || end < 0 {
		t.Fatal("shell.sh no longer cuts the saved state where this test looks for it")
	}
	cut := shellCode[start : start+end]
	for _, saved := range []string{
		"f () \n{ \n    :\n}\n#gpudispatch-aliases\nalias ll='ls -l'\ntrap -- 'echo bye' SIGUSR1\n#opts\nset +o allexport\nshopt -s extglob\n",
		"#gpudispatch-aliases\n#opts\n",
		"#gpudispatch-aliases\nalias a=b\n#opts\n",
		"no markers at all\n",
		"f () \n{ \n    :\n}\n#gpudispatch-aliases\n",
		"only options\n#opts\nset -o pipefail\n",
		"two\n#opts\nfirst\n#opts\nsecond\n#gpudispatch-aliases\n",
		"",
	} {
		out, err := exec.Command("bash", "-c", "_g_state=$1\n"+cut+"\nprintf '%s\\0%s\\0%s' \"$_g_fstate\" \"$_g_state\" \"$_g_opts\"", "bash", saved).Output()
		if err != nil {
			t.Fatalf("%q: %v", saved, err)
		}
		want := strings.Split(string(out), "\x00")
		funcs, rest, opts := splitSaved(saved)
		if got := []string{funcs, rest, opts}; strings.Join(got, "\x00") != string(out) {
			t.Errorf("%q: cut into %q, the shell cuts it into %q", saved, got, want)
		}
	}
}
