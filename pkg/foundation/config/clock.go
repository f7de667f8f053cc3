package config

import "time"

// Clock is the wall clock a service reads: the machine's, moved by Offset.
// Offset is a fault to inject, not a setting to run with: the chaos suite
// gives each process its own (clock skew between hosts whose NTP drifted),
// to show that what one process decides on its clock (the scheduler's
// admission expiries) is judged soundly by another (the api's and the
// notifier's checks of them). It moves what the service's own code reads as
// now; the Kafka client's record timestamps and Redis's TIME keep the
// machine's clock.
type Clock struct {
	Offset time.Duration `env:"WR_CLOCK_OFFSET" envDefault:"0s"`
}

// Now is the machine's time plus Offset.
func (c Clock) Now() time.Time {
	if c.Offset == 0 {
		return time.Now()
	}
	return time.Now().Add(c.Offset)
}
