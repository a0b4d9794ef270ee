package dispatch

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// What a submitter's environment holds (tokens, keys) is kept only where
// its owner alone can read it: a file of the log dir's env/ directory
// (0700; the file 0600, whatever the log dir's mode), named by a hash of
// its content, which the journal names (JobSpec.EnvFile) in place of the
// values; a group that may read the log dir reads no environment. serve
// --resume reads the file back.

// envDir is the log dir's directory of submitted environments (job names
// never start with a dot).
const envDir = ".env"

// keepEnv writes env (NAME=value entries) into the log dir's env
// directory, once per content, and returns the file's name there.
func keepEnv(logDir string, env []string) (string, error) {
	data := []byte(strings.Join(env, "\x00"))
	sum := sha256.Sum256(data)
	name := hex.EncodeToString(sum[:12])
	dir := filepath.Join(logDir, envDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("keeping a submit's environment: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		return "", fmt.Errorf("keeping a submit's environment: %s is not a directory of mode 0700", dir)
	}
	path := filepath.Join(dir, name)
	if _, err := os.Lstat(path); err == nil {
		return name, nil
	}
	f, err := os.OpenFile(path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC|noFollow, 0o600)
	if err != nil {
		return "", fmt.Errorf("keeping a submit's environment: %w", err)
	}
	_, err = f.Write(data)
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil {
		return "", fmt.Errorf("keeping a submit's environment: %w", err)
	}
	return name, nil
}

// readEnv reads back an environment keepEnv kept under name.
func readEnv(logDir, name string) ([]string, error) {
	if name == "" || strings.ContainsAny(name, "/\\.") {
		return nil, fmt.Errorf("a submit's environment named %q", name)
	}
	data, err := os.ReadFile(filepath.Join(logDir, envDir, name))
	if err != nil {
		return nil, fmt.Errorf("a submit's environment: %w", err)
	}
	if len(data) == 0 {
		return nil, nil
	}
	return strings.Split(string(bytes.TrimRight(data, "\x00")), "\x00"), nil
}
