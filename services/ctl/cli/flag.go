package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

// flagOpts are the flags of the flag commands.
type flagOpts struct {
	keyFile string
	from    string
	out     string
	def     string
	items   []string
	pub     string
}

func (a *app) flagCmd() *cobra.Command {
	var o flagOpts
	keyFlag := func(c *cobra.Command) {
		c.Flags().StringVar(&o.keyFile, "key-file", "", "file holding the operator's flag key, a base64 Ed25519 seed of 32 bytes (else env WR_FLAG_KEY)")
	}
	sign := &cobra.Command{
		Use:   "sign",
		Short: "Sign the kits' flag: per item, fail open or closed, and the off switch (no Kafka, Redis or api needed)",
		Long: `Sign the flag the kits read (waitroomkit.WithFlag, docs/integrating.md): per
item and by default, how the kit fails when the room cannot answer (open,
closed) and the off switch (through: everyone straight in; paused: a static
"sale paused" page; on: no switch). It needs only the key: it works while
Kafka, Redis and the api are down, which is when it is needed.

--from starts from the flag in force (verified with the key), so one item can
be flipped without restating the others; --item ID= removes the item's own
entry (it follows the default again). --out writes the file the kits read,
atomically (a kit never reads half a flag); without it the flag is printed.`,
		Example: `  head -c 32 /dev/urandom | base64 > flag.key; waitroomctl flag public-key --key-file flag.key
  waitroomctl flag sign --key-file flag.key --default closed --item merch=open --out /srv/flag/flag.jws
  waitroomctl flag sign --key-file flag.key --from /srv/flag/flag.jws --item concert=paused --out /srv/flag/flag.jws
  waitroomctl flag sign --key-file flag.key --from /srv/flag/flag.jws --item concert=on --out /srv/flag/flag.jws`,
		Args: exactArgs(0, "no arguments"),
		RunE: a.leaf(func(context.Context) error { return a.runFlagSign(&o, time.Now()) }),
	}
	keyFlag(sign)
	f := sign.Flags()
	f.StringVar(&o.from, "from", "", "a signed flag to start from (the one the kits read), verified with the key")
	f.StringVar(&o.out, "out", "", "write the signed flag to this file, atomically (else print it)")
	f.StringVar(&o.def, "default", "", "for every item not named: open, closed, through, paused, on (comma-separated)")
	f.StringArrayVar(&o.items, "item", nil, "ID=open|closed|through|paused|on[,…]; ID= removes the item's entry; repeatable")

	show := &cobra.Command{
		Use:   "show <file>",
		Short: "Verify a signed flag and show what it says",
		Args:  exactArgs(1, "one <file>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.leaf(func(context.Context) error { return a.runFlagShow(&o, args[0]) })(cmd, args)
		},
	}
	keyFlag(show)
	show.Flags().StringVar(&o.pub, "public-key", "", "the base64 public key to verify with (the one the kits have), instead of --key-file")

	pub := &cobra.Command{
		Use:   "public-key",
		Short: "Print the public key the kits verify the flag with",
		Args:  exactArgs(0, "no arguments"),
		RunE: a.leaf(func(context.Context) error {
			key, err := a.flagKey(&o)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.out, base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)))
			return err
		}),
	}
	keyFlag(pub)
	return group("flag", "Sign and check the kits' flag: fail open or closed per item, and the off switch", sign, show, pub)
}

// flagKey reads the key from --key-file, else WR_FLAG_KEY.
func (a *app) flagKey(o *flagOpts) (ed25519.PrivateKey, error) {
	raw := a.env.FlagKey
	if o.keyFile != "" {
		b, err := os.ReadFile(o.keyFile)
		if err != nil {
			return nil, usagef("--key-file: %v", err)
		}
		raw = string(b)
	}
	if raw == "" {
		return nil, usagef("no flag key: give --key-file or set WR_FLAG_KEY")
	}
	key, err := waitroomkit.ParseFlagKey(raw)
	if err != nil {
		return nil, usagef("flag key: %v", err)
	}
	return key, nil
}

func (a *app) runFlagSign(o *flagOpts, now time.Time) error {
	key, err := a.flagKey(o)
	if err != nil {
		return err
	}
	var f waitroomkit.Flag
	if o.from != "" {
		if f, err = readFlag(o.from, key.Public().(ed25519.PublicKey)); err != nil {
			return usagef("--from: %v", err)
		}
	}
	if o.def != "" {
		if err := f.Default.Apply(o.def); err != nil {
			return usagef("--default: %v", err)
		}
	}
	for _, it := range o.items {
		id, words, ok := strings.Cut(it, "=")
		if !ok || id == "" {
			return usagef("--item %q: want ID=open|closed|through|paused|on[,…] (ID= removes the entry)", it)
		}
		if f.Items == nil {
			f.Items = map[string]waitroomkit.ItemFlag{}
		}
		if words == "" {
			delete(f.Items, id)
			continue
		}
		e := f.Items[id]
		if err := e.Apply(words); err != nil {
			return usagef("--item %s: %v", id, err)
		}
		f.Items[id] = e
	}
	// A kit refuses a flag older than the one it holds: the new one is
	// issued after the one it starts from (in whole seconds, as iat is),
	// whatever this machine's clock says.
	prev := f.IssuedAt
	f.IssuedAt = now.Truncate(time.Second)
	if o.from != "" && !f.IssuedAt.After(prev) {
		f.IssuedAt = prev.Add(time.Second)
	}
	s, err := waitroomkit.SignFlag(key, f)
	if err != nil {
		return err
	}
	if o.out == "" {
		_, err := fmt.Fprintln(a.out, s)
		return err
	}
	if err := waitroomkit.WriteFlagFile(o.out, s); err != nil {
		return err
	}
	return a.printFlag(f, "signed and written to "+o.out)
}

func (a *app) runFlagShow(o *flagOpts, file string) error {
	var pub ed25519.PublicKey
	if o.pub != "" {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(o.pub))
		if err != nil || len(b) != ed25519.PublicKeySize {
			return usagef("--public-key: a base64 Ed25519 public key of 32 bytes")
		}
		pub = b
	} else {
		key, err := a.flagKey(o)
		if err != nil {
			return err
		}
		pub = key.Public().(ed25519.PublicKey)
	}
	f, err := readFlag(file, pub)
	if err != nil {
		return err
	}
	return a.printFlag(f, "verified: "+file)
}

func readFlag(file string, pub ed25519.PublicKey) (waitroomkit.Flag, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return waitroomkit.Flag{}, fmt.Errorf("read flag: %w", err)
	}
	return waitroomkit.VerifyFlag(string(b), pub)
}

func (a *app) printFlag(f waitroomkit.Flag, how string) error {
	if a.wantJSON() {
		return a.printJSON(struct {
			IssuedAt time.Time                       `json:"issuedAt"`
			Default  waitroomkit.ItemFlag            `json:"default"`
			Items    map[string]waitroomkit.ItemFlag `json:"items"`
		}{f.IssuedAt.UTC(), f.Default, f.Items})
	}
	word := func(f waitroomkit.ItemFlag) string {
		mode, off := f.FailMode, f.Off
		if mode == "" {
			mode = "(the kit's)"
		}
		if off == "" {
			off = "on"
		}
		return "fail " + mode + ", " + off
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "issued:\t%s\n", f.IssuedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(tw, "default:\t%s\n", word(f.Default))
	for _, id := range slices.Sorted(maps.Keys(f.Items)) {
		fmt.Fprintf(tw, "item %s:\t%s\n", id, word(f.Items[id]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(a.out, how)
	return err
}
