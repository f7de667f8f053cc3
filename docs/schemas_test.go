package docs_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/docs"
	"github.com/waitroom/waitroom/topics"
)

// compile compiles one of the topics' schemas as draft 2020-12.
func compile(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	b, err := docs.Files.ReadFile(name)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	require.NoError(t, c.AddResource(name, doc))
	s, err := c.Compile(name)
	require.NoError(t, err)
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, record []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(record))
	require.NoError(t, err)
	return s.Validate(v)
}

const (
	hexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hexB = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// record is one sample: a name and the encoder's output, which the topic's own
// decoder takes (checked) and the schema must take too.
type record struct {
	name  string
	value []byte
}

func registrationSamples() []record {
	client := &topics.ClientMeta{IP: "203.0.113.7", UserAgent: "Mozilla/5.0"}
	reg := func(name string, e topics.RegistrationEvent) record { return record{name, topics.Encode(&e)} }
	return []record{
		reg("register", topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "T1", ItemID: "shoe", UserID: "anon-x", RequestedAt: 1700000000000, Client: client, Holder: topics.HolderToken}),
		reg("register proven", topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "T2", ItemID: "shoe", UserID: "site:alice-42", RequestedAt: 1700000000000, Holder: topics.HolderUser}),
		reg("register before holders", topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "T3", ItemID: "shoe", UserID: "bob", RequestedAt: 1}),
		reg("register with bypass", topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "T4", ItemID: "shoe", UserID: "vip", RequestedAt: 2, Client: client,
			Bypass: &topics.BypassUse{Code: "B1", Count: 5, ExpiresAt: 1700000600000}, Holder: topics.HolderToken}),
		reg("register in a window", topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "T5", ItemID: "drop", UserID: "u", RequestedAt: 2, Window: 1700000060000, Holder: topics.HolderToken}),
		reg("leave", topics.RegistrationEvent{V: 1, Kind: topics.KindLeave, TokenID: "T1", ItemID: "shoe", UserID: "anon-x", RequestedAt: 3, Client: client, Holder: topics.HolderToken}),
		reg("complete", topics.RegistrationEvent{V: 1, Kind: topics.KindComplete, TokenID: "T1", ItemID: "shoe", UserID: "anon-x", RequestedAt: 4, Client: client, Holder: topics.HolderUser}),
		reg("abandon", topics.RegistrationEvent{V: 1, Kind: topics.KindAbandon, TokenID: "T1", ItemID: "shoe", UserID: "anon-x", RequestedAt: 5, Holder: topics.HolderToken}),
		reg("draw", topics.RegistrationEvent{V: 1, Kind: topics.KindDraw, ItemID: "drop", RequestedAt: 6,
			Draw: &topics.Draw{Window: 1700000060000, Round: 3, Seed: hexA, Commit: hexB}}),
	}
}

func itemSamples() []record {
	it := func(name string, s topics.ItemState) record { return record{name, topics.Encode(&s)} }
	policy := topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 1000, SessionTTLSeconds: 300}
	return []record{
		it("fifo", topics.ItemState{V: 1, ItemID: "shoe", Name: "Shoe", Stock: topics.Unlimited, Enabled: true, Policy: policy, Version: 1, UpdatedAt: 1}),
		it("steered", topics.ItemState{V: 1, ItemID: "shoe", Stock: topics.Unlimited, Enabled: true, Version: 4, UpdatedAt: 4,
			Policy: topics.AdmissionPolicy{RatePerSecond: 50, SessionTTLSeconds: 300, MinRate: 0.5, MaxRate: 20,
				Steer: &topics.SteerPolicy{TargetP95Ms: 300, OnSignalLost: topics.SteerStatic, Mode: topics.SteerAdvise}}}),
		it("paused, sold out", topics.ItemState{V: 1, ItemID: "shoe", Stock: 0, Policy: topics.AdmissionPolicy{RatePerSecond: 2.5, Paused: true}, Version: 2, UpdatedAt: 2}),
		it("reject", topics.ItemState{V: 1, ItemID: "shoe", Stock: 5, Enabled: true, Policy: policy, Mode: topics.ModeReject, RejectMessage: "back at 9", Version: 3, UpdatedAt: 3}),
		it("passthrough with guards", topics.ItemState{V: 1, ItemID: "shoe", Stock: 5, Enabled: true, Policy: policy, Mode: topics.ModePassthrough,
			IdleTimeoutSeconds: 120, PowDifficulty: 12, Version: 4, UpdatedAt: 4}),
		it("random", topics.ItemState{V: 1, ItemID: "drop", Stock: 100, Enabled: true, Policy: policy, Mode: topics.ModeRandom, DrawWindowSeconds: 60,
			DrawCommit: hexA, DrawRounds: 1000, DrawSalt: "00112233445566778899aabbccddeeff", Version: 5, UpdatedAt: 5}),
		it("scheduled", topics.ItemState{V: 1, ItemID: "drop", Stock: 100, Enabled: true, Policy: policy, OpensAt: 1700000060000,
			DrawCommit: hexB, DrawRounds: 1000, DrawSalt: "aa", Version: 6, UpdatedAt: 6}),
		it("own pages by language", topics.ItemState{V: 1, ItemID: "tour", Stock: 5, Enabled: true, Policy: policy,
			Template:  `<html lang="{{.Lang}}"><title>t</title><body>{{.Room}}</body></html>`,
			Templates: map[string]string{"ko": `<html lang="ko"><title>t</title><body>{{.Room}}</body></html>`}, Version: 7, UpdatedAt: 7}),
	}
}

func admissionSamples() []record {
	ad := func(name string, a topics.AdmissionEvent) record { return record{name, topics.Encode(&a)} }
	return []record{
		ad("tick", topics.AdmissionEvent{V: 1, ItemID: "shoe", Admitted: []string{"T1", "T2"}, ExpiresAt: []int64{1700000300000, 1700000300001},
			Head: 2, Waiting: 10, Active: 2, Epoch: 7, At: 1700000000000}),
		ad("tick with applied offsets", topics.AdmissionEvent{V: 1, ItemID: "shoe", Admitted: []string{"T1"}, ExpiresAt: []int64{1700000300000},
			Head: 1, Waiting: 3, Active: 1, Epoch: 7, At: 1700000000000, Applied: map[int32]int64{0: 41, 3: 7}}),
		ad("tick before expiries", topics.AdmissionEvent{V: 1, ItemID: "shoe", Admitted: []string{"T1"}, Head: 1, Epoch: 1, At: 1}),
		ad("empty tick", topics.AdmissionEvent{V: 1, ItemID: "shoe", Admitted: []string{}, Head: 2, Waiting: 0, Active: 0, Epoch: 7, At: 2}),
		ad("epoch claim", topics.AdmissionEvent{V: 1, Kind: topics.KindEpochClaim, ItemID: topics.EpochClaimItem, Epoch: 8, At: 3}),
		ad("steer", topics.AdmissionEvent{V: 1, Kind: topics.KindSteer, ItemID: "shoe", Epoch: 8, At: 4, Steer: &topics.SteerDecision{
			Target: 120, Allow: 12, HeadLimit: 4012, Rate: 3.5, Reason: "grow: p95 under the band", P95Ms: 180.5, SiteActive: 110, ShowRatio: 0.8, DelayMs: 4000, SignalAgeMs: 900}}),
		ad("steer advice", topics.AdmissionEvent{V: 1, Kind: topics.KindSteer, ItemID: "shoe", Epoch: 8, At: 5, Steer: &topics.SteerDecision{
			Target: 90, Allow: 0, HeadLimit: 4000, Rate: 1, Advice: true, Reason: "shrink: p95 or errors over target"}}),
	}
}

func blockSamples() []record {
	bl := func(name string, b topics.BlockState) record { return record{name, topics.Encode(&b)} }
	return []record{
		bl("user", topics.BlockState{V: 1, Subject: "user:mallory", Reason: "scalping", At: 1700000000000}),
		bl("ip range until", topics.BlockState{V: 1, Subject: "ip:203.0.113.0/24", Until: 1700000600000, At: 1700000000000}),
		bl("ipv6", topics.BlockState{V: 1, Subject: "ip:2001:db8::/32", At: 1}),
	}
}

// TestTopicRecordsMatchTheirSchemas encodes a record of every kind with the
// topics' encoder: each one the topic's decoder takes must validate against
// the topic's JSON Schema.
func TestTopicRecordsMatchTheirSchemas(t *testing.T) {
	for _, tc := range []struct {
		schema  string
		samples []record
		decode  func([]byte) error
	}{
		{docs.RegistrationSchema, registrationSamples(), func(b []byte) error { _, err := topics.DecodeRegistration(b); return err }},
		{docs.ItemSchema, itemSamples(), func(b []byte) error { _, err := topics.DecodeItem(b); return err }},
		{docs.AdmissionSchema, admissionSamples(), func(b []byte) error { _, err := topics.DecodeAdmission(b); return err }},
		{docs.BlockSchema, blockSamples(), func(b []byte) error { _, err := topics.DecodeBlock(b); return err }},
	} {
		s := compile(t, tc.schema)
		for _, r := range tc.samples {
			require.NoError(t, tc.decode(r.value), "%s %s: the sample is not a valid record: %s", tc.schema, r.name, r.value)
			require.NoError(t, validate(t, s, r.value), "%s %s: %s", tc.schema, r.name, r.value)
		}
	}
}

// TestSchemasRefuseWhatDecodersRefuse: records the topics' decoders refuse
// are refused by the schemas too, so the schemas are not merely permissive.
func TestSchemasRefuseWhatDecodersRefuse(t *testing.T) {
	for _, tc := range []struct {
		schema, name, value string
		decode              func([]byte) error
	}{
		{docs.RegistrationSchema, "unknown kind", `{"v":1,"kind":"join","tokenId":"T","itemId":"i","userId":"u","requestedAt":1}`, decodeRegistration},
		{docs.RegistrationSchema, "unknown field", `{"v":1,"kind":"leave","tokenId":"T","itemId":"i","userId":"u","requestedAt":1,"extra":1}`, decodeRegistration},
		{docs.RegistrationSchema, "future version", `{"v":2,"kind":"leave","tokenId":"T","itemId":"i","userId":"u","requestedAt":1}`, decodeRegistration},
		{docs.RegistrationSchema, "bad holder", `{"v":1,"kind":"register","tokenId":"T","itemId":"i","userId":"u","requestedAt":1,"holder":"device"}`, decodeRegistration},
		{docs.RegistrationSchema, "bypass on a leave", `{"v":1,"kind":"leave","tokenId":"T","itemId":"i","userId":"u","requestedAt":1,"bypass":{"code":"B","count":1,"expiresAt":1}}`, decodeRegistration},
		{docs.RegistrationSchema, "draw naming a token", `{"v":1,"kind":"draw","tokenId":"T","itemId":"i","userId":"","requestedAt":1,"draw":{"window":1,"round":1,"seed":"` + hexA + `","commit":"` + hexB + `"}}`, decodeRegistration},
		{docs.RegistrationSchema, "register without a userId", `{"v":1,"kind":"register","tokenId":"T","itemId":"i","userId":"","requestedAt":1}`, decodeRegistration},
		{docs.ItemSchema, "random without a commitment", `{"v":1,"itemId":"i","name":"","stock":1,"enabled":true,"policy":{"ratePerSecond":1,"maxActive":0,"sessionTTLSeconds":60},"mode":"random","version":1,"updatedAt":1}`, decodeItem},
		{docs.ItemSchema, "stock below unlimited", `{"v":1,"itemId":"i","name":"","stock":-2,"enabled":true,"policy":{"ratePerSecond":1,"maxActive":0,"sessionTTLSeconds":60},"version":1,"updatedAt":1}`, decodeItem},
		{docs.ItemSchema, "pow too hard", `{"v":1,"itemId":"i","name":"","stock":1,"enabled":true,"policy":{"ratePerSecond":1,"maxActive":0,"sessionTTLSeconds":60},"powDifficulty":29,"version":1,"updatedAt":1}`, decodeItem},
		{docs.AdmissionSchema, "unknown kind", `{"v":1,"kind":"tick","itemId":"i","admitted":[],"head":0,"waiting":0,"active":0,"epoch":1,"at":1}`, decodeAdmission},
		{docs.AdmissionSchema, "negative applied offset", `{"v":1,"itemId":"i","admitted":[],"head":0,"waiting":0,"active":0,"epoch":1,"at":1,"applied":{"0":-1}}`, decodeAdmission},
		{docs.AdmissionSchema, "negative head", `{"v":1,"itemId":"i","admitted":[],"head":-1,"waiting":0,"active":0,"epoch":1,"at":1}`, decodeAdmission},
		{docs.BlockSchema, "not a subject", `{"v":1,"subject":"mallory","at":1}`, decodeBlock},
		{docs.BlockSchema, "reason too long", `{"v":1,"subject":"user:m","reason":"` + strings.Repeat("x", 301) + `","at":1}`, decodeBlock},
	} {
		require.Error(t, tc.decode([]byte(tc.value)), "%s %s: the decoder takes it", tc.schema, tc.name)
		require.Error(t, validate(t, compile(t, tc.schema), []byte(tc.value)), "%s %s: the schema takes it", tc.schema, tc.name)
	}
}

func decodeRegistration(b []byte) error { _, err := topics.DecodeRegistration(b); return err }
func decodeItem(b []byte) error         { _, err := topics.DecodeItem(b); return err }
func decodeAdmission(b []byte) error    { _, err := topics.DecodeAdmission(b); return err }
func decodeBlock(b []byte) error        { _, err := topics.DecodeBlock(b); return err }
