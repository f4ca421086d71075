package main

import (
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"astro/events/natsserver"
)

// TestDeployNATSConfig holds deploy/nats-server.conf to the embedded
// server's users and permissions, which TestNATSSecurity proves.
func TestDeployNATSConfig(t *testing.T) {
	for _, v := range []string{"ASTRO_NATS_PASSWORD", "NATS_CONSUMER_PASSWORD", "NATS_SERVICE_PASSWORD"} {
		t.Setenv(v, "pw-"+v)
	}
	opts, err := server.ProcessConfigFile("../../deploy/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	if opts.NoAuthUser != "" || opts.Username != "" || opts.Authorization != "" {
		t.Fatalf("the config lets someone in without a user of its own")
	}
	var names []string
	for _, u := range opts.Users {
		names = append(names, u.Username)
		if u.Password != "pw-"+map[string]string{
			natsserver.UserAstro: "ASTRO_NATS_PASSWORD", natsserver.UserConsumer: "NATS_CONSUMER_PASSWORD", natsserver.UserService: "NATS_SERVICE_PASSWORD",
		}[u.Username] {
			t.Errorf("%s: password not from the environment", u.Username)
		}
		want, got := natsserver.Permissions(u.Username, protectedConsumers()), u.Permissions
		if (want == nil) != (got == nil) {
			t.Fatalf("%s: permissions %+v, want %+v", u.Username, got, want)
		}
		if want == nil {
			continue
		}
		same := func(a, b *server.SubjectPermission) bool {
			if a == nil || b == nil {
				return a == b
			}
			return slices.Equal(a.Allow, b.Allow) && slices.Equal(a.Deny, b.Deny)
		}
		if !same(want.Publish, got.Publish) || !same(want.Subscribe, got.Subscribe) || got.Response != nil {
			t.Errorf("%s: permissions differ from the embedded server's\n got publish %+v subscribe %+v\nwant publish %+v subscribe %+v",
				u.Username, got.Publish, got.Subscribe, want.Publish, want.Subscribe)
		}
	}
	if want := []string{natsserver.UserAstro, natsserver.UserConsumer, natsserver.UserService}; !slices.Equal(names, want) {
		t.Fatalf("users %v, want %v", names, want)
	}
}
