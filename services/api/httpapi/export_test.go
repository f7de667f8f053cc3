package httpapi

// Mount is mount, for the test that holds the served routes to the spec.
var Mount = mount
