// Command waitroomflag signs the operator's flag that waitroomkit reads
// (WithFlag): per item, fail open or closed when the room cannot answer, and
// the off switch (everyone through, or a paused page). Publish its output
// where the kits read it (a file on the shop's hosts, a static URL).
//
//	waitroomflag -key-file flag.key -item concert=paused -item merch=open > flag.jws
//	waitroomflag -key-file flag.key -public   # the public key to give the kits
//
// The key is a base64 Ed25519 seed of 32 bytes (-key-file, or WR_FLAG_KEY):
// head -c 32 /dev/urandom | base64 > flag.key
package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

func main() {
	if err := run(os.Args[1:], os.Getenv("WR_FLAG_KEY"), os.Stdout, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "waitroomflag:", err)
		os.Exit(2)
	}
}

// items collects -item ID=word[,word]: open, closed (fail mode), through,
// paused (off switch), on (no switch).
type items map[string]waitroomkit.ItemFlag

func (m items) String() string { return "" }

func (m items) Set(v string) error {
	id, words, ok := strings.Cut(v, "=")
	if !ok || id == "" {
		return fmt.Errorf("%q: want ID=open|closed|through|paused|on[,…]", v)
	}
	f := m[id]
	if err := f.Apply(words); err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	m[id] = f
	return nil
}

func run(args []string, envKey string, out io.Writer, now time.Time) error {
	fs := flag.NewFlagSet("waitroomflag", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	keyFile := fs.String("key-file", "", "file holding the base64 Ed25519 seed (else WR_FLAG_KEY)")
	public := fs.Bool("public", false, "print the base64 public key the kits verify with, and nothing else")
	def := fs.String("default", "", "for every item not named: open, closed, through, paused (comma-separated)")
	its := items{}
	fs.Var(its, "item", "ID=open|closed|through|paused|on[,…], repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	raw := envKey
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			return fmt.Errorf("read key: %w", err)
		}
		raw = string(b)
	}
	key, err := waitroomkit.ParseFlagKey(raw)
	if err != nil {
		return errors.New("the key must be a base64 Ed25519 seed of 32 bytes (-key-file or WR_FLAG_KEY)")
	}
	if *public {
		_, err := fmt.Fprintln(out, base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)))
		return err
	}
	f := waitroomkit.Flag{IssuedAt: now, Items: its}
	if *def != "" {
		if err := f.Default.Apply(*def); err != nil {
			return fmt.Errorf("-default: %w", err)
		}
	}
	s, err := waitroomkit.SignFlag(key, f)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, s)
	return err
}
