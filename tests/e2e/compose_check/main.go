// compose_check loads a compose file with the compose-go v2 loader (the library
// `docker compose` v2 uses), so a test can validate compose.yaml without a Docker
// engine.  Interpolation uses only the -env values given (never the caller's
// environment), so a test controls exactly which variables are set.  On success the
// fully loaded, interpolated and normalised project is printed as JSON; on any error
// the error goes to stderr and the exit status is 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

type envFlags []string

func (e *envFlags) String() string     { return strings.Join(*e, ",") }
func (e *envFlags) Set(v string) error { *e = append(*e, v); return nil }

func main() {
	var env envFlags
	flag.Var(&env, "env", "KEY=VALUE available to interpolation (repeatable)")
	name := flag.String("project-name", "bigbinf", "compose project name")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: compose_check [-env KEY=VALUE]... COMPOSE_FILE")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *name, env); err != nil {
		fmt.Fprintln(os.Stderr, "compose_check:", err)
		os.Exit(1)
	}
}

func run(path, name string, env []string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	opts, err := cli.NewProjectOptions([]string{abs},
		cli.WithName(name),
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithEnv(env),
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return err
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		return err
	}
	out, err := project.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(out, '\n'))
	return err
}
