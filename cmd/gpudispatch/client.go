package main

import (
	"context"
	"errors"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/control"
)

// dialRun is a client of the run on logDir.
func dialRun(logDir string) (*control.Client, error) {
	c, err := control.Dial(logDir)
	if err != nil {
		return nil, usageError("%v", err)
	}
	return c, nil
}

// runError is what a user is told when the run could not be asked.
func runError(logDir string, err error) error {
	if errors.Is(err, control.ErrNoServer) {
		return usageError("%v: start one with gpudispatch serve -o %s", err, logDir)
	}
	var re *control.RequestError
	if errors.As(err, &re) {
		return usageError("%s: %s", logDir, re.Msg)
	}
	return usageError("%v", err)
}

// liveStatus asks the run on logDir for its status; it returns nil
// without an error when no run is there.
func liveStatus(ctx context.Context, logDir string) (*dispatch.Status, error) {
	client, err := control.Dial(logDir)
	if err != nil {
		return nil, nil // no socket can be there
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := client.Status(ctx)
	if errors.Is(err, control.ErrNoServer) {
		return nil, nil
	}
	return st, err
}
