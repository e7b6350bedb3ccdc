// Package control is the server side of a host's control socket: NewHandler answers the routes
// the api package lists by calling an api.Service (and, when given or implemented, an
// api.PairingService, api.RelayService and api.CardIssuer), and turns errors into api.Error
// answers with a stable code and a hint.
//
// It imports nothing but api, so the host daemon serves the socket without depending on the SDK
// (package client), and the SDK's tests can serve a fake service through the real handler.
//
// Requests are JSON, refused with unknown fields or trailing data (a typo in a hand-written
// request is an error, not a dropped field), and capped at MaxRequestBody (MaxCardBody for a host
// card). Long polls (GET /v1/wait, GET /v1/pair/wait) end with the client's request.
package control
