import AsyncHTTPClient
import PushCore
import _CryptoExtras
import FCMCore
import FCMHTTP
import Foundation
import MockFCM
import MockServerSupport
import NIOCore
import NIOHTTP1
import NIOSSL
import Prometheus
import Testing

/// ``FCMHTTPClient`` against the mock FCM over real TLS and HTTP/2: answers as FCM gives them,
/// classified as docs/design.md ("Talking to FCM") says, and the OAuth token's life.
@Suite("FCM sender against the mock FCM", .timeLimit(.minutes(3)))
struct SenderAgainstMockTests {
    @Test func deliversWithOneTokenSharedByEveryRequest() async throws {
        try await FCMHarness.run { harness in
            try await withThrowingTaskGroup(of: FCMResponse.self) { group in
                for index in 0..<20 { group.addTask { try await harness.send(try FCMHarness.request("device-\(index)")) } }
                for try await response in group {
                    #expect(response.status == 200)
                    #expect(response.decision == .delivered)
                    #expect(response.messageName?.hasPrefix("projects/demo-project/messages/") == true)
                }
            }
            #expect(harness.server.totalDelivered == 20)
            #expect(harness.server.deliveredCount(token: "device-7") == 1)
            #expect(harness.server.tokenExchangeCount == 1)
            #expect(harness.client.isReady)
            let sent = try #require(harness.server.receivedMessages().first { $0.target == "device-0" })
            let body = String(decoding: sent.body, as: UTF8.self)
            #expect(body.contains(#""android":{"priority":"high","collapse_key":"order-42"}"#))
        }
    }

    @Test func unregisteredTokenIsUnregistered() async throws {
        try await FCMHarness.run { harness in
            harness.server.markUnregistered(token: "gone")
            let response = try await harness.send(try FCMHarness.request("gone"))
            #expect(response.status == 404)
            #expect(response.decision == .unregistered)
            #expect(response.reason == "UNREGISTERED")
            #expect(harness.server.deliveredCount(token: "gone") == 0)
        }
    }

    /// An invalid token in Google's current shape (no BadRequest, the message says so) and in the
    /// older one (a BadRequest naming `message.token`) is unregistered; a BadRequest naming `data` is not.
    @Test func invalidTokenInEitherShapeIsUnregisteredAndNamingDataRejected() async throws {
        try await FCMHarness.run(configure: {
            $0.invalidTokens = ["malformed"]
            $0.legacyInvalidTokens = ["malformed-legacy"]
        }) { harness in
            let token = try await harness.send(try FCMHarness.request("malformed"))
            #expect(token.status == 400)
            #expect(token.error?.fieldViolations.isEmpty == true)
            #expect(token.error?.message == "The registration token is not a valid FCM registration token")
            #expect(token.decision == .unregistered)
            #expect(token.reason == "INVALID_ARGUMENT")
            let legacy = try await harness.send(try FCMHarness.request("malformed-legacy"))
            #expect(legacy.status == 400)
            #expect(legacy.error?.fieldViolations.map(\.field) == ["message.token"])
            #expect(legacy.decision == .unregistered)

            // Herald refuses a number in `data` at intake, so the test sends that body itself.
            let access = try await harness.client.tokens.accessToken(projectID: FCMHarness.projectID, deadline: .now + .seconds(5))
            let raw = try await rawPost(harness, bearer: access.value, body: #"{"message":{"token":"fine","data":{"count":1}}}"#)
            #expect(raw.status == 400)
            #expect(raw.error?.fieldViolations.first?.field.hasPrefix("message.data") == true)
            #expect(raw.decision == .rejected)
            #expect(harness.server.totalDelivered == 0)
        }
    }

    @Test func htmlNotFoundIsRejectedAndMarksNothing() async throws {
        try await FCMHarness.run(configureClient: { $0.baseURL += "/wrong-prefix" }) { harness in
            let response = try await harness.send(try FCMHarness.request("device"))
            #expect(response.status == 404)
            #expect(response.error == nil)
            #expect(response.reason == nil)
            #expect(response.decision == .rejected)
            #expect(harness.server.requestCount(token: "device") == 0)
        }
    }

    @Test func forbiddenWithoutFcmErrorIsRejected() async throws {
        try await FCMHarness.run(configure: { $0.disabledProjects = [FCMHarness.projectID] }) { harness in
            let response = try await harness.send(try FCMHarness.request("device"))
            #expect(response.status == 403)
            #expect(response.error?.errorCode == nil)
            #expect(response.reason == "PERMISSION_DENIED")
            #expect(response.decision == .rejected)
        }
    }

    @Test func senderIDMismatchIsRejected() async throws {
        try await FCMHarness.run(configure: { $0.senderMismatchTokens = ["other-app"] }) { harness in
            let response = try await harness.send(try FCMHarness.request("other-app"))
            #expect(response.status == 403)
            #expect(response.decision == .rejected)
            #expect(response.reason == "SENDER_ID_MISMATCH")
        }
    }

    /// THIRD_PARTY_AUTH_ERROR and its older name APNS_AUTH_ERROR come with a 401 but say nothing
    /// of the access token: rejected at once, the token neither refreshed nor the message resent.
    @Test func thirdPartyAuthErrorsAreRejectedWithoutRefreshingTheAccessToken() async throws {
        try await FCMHarness.run(configure: {
            $0.thirdPartyAuthErrorTokens = ["third-party"]
            $0.apnsAuthErrorTokens = ["apns"]
        }) { harness in
            for (token, reason) in [("third-party", "THIRD_PARTY_AUTH_ERROR"), ("apns", "APNS_AUTH_ERROR")] {
                let response = try await harness.send(try FCMHarness.request(token))
                #expect(response.status == 401)
                #expect(response.decision == .rejected)
                #expect(response.reason == reason)
                #expect(!response.accessTokenRefreshed)
                #expect(harness.server.requestCount(token: token) == 1)
            }
            #expect(harness.server.tokenExchangeCount == 1)
        }
    }

    /// A 500 whose canonical status Herald does not know is retried as server trouble.
    @Test func unknownStatusIsRetriedByItsHTTPStatus() async throws {
        try await FCMHarness.run(configure: { $0.unknownErrorTokens = ["flaky"] }) { harness in
            let (response, attempts) = try await harness.deliver(try FCMHarness.request("flaky"), attempts: 3)
            #expect(response.status == 500)
            #expect(response.reason == "UNKNOWN")
            #expect(response.decision == .retry(FCMRetry(notBefore: nil, serverTrouble: true)))
            #expect(attempts == 3)
            #expect(harness.server.requestCount(token: "flaky") == 3)
        }
    }

    /// QUOTA_EXCEEDED in Google's shape, with a QuotaFailure naming the project's quota or a
    /// device's: the answer says whose, and passes Retry-After on.
    @Test func quotaExceededSaysWhoseQuotaRanOut() async throws {
        try await FCMHarness.run { harness in
            harness.server.script(token: "busy", [.quotaExceeded(retryAfterSeconds: 2), .deviceQuotaExceeded(retryAfterSeconds: nil)])
            let project = try await harness.send(try FCMHarness.request("busy"))
            #expect(project.status == 429)
            #expect(project.retryAfter == .seconds(2))
            #expect(project.decision == .retry(FCMRetry(notBefore: .seconds(2), serverTrouble: false, quota: .project)))
            let device = try await harness.send(try FCMHarness.request("busy"))
            #expect(device.decision == .retry(FCMRetry(notBefore: nil, serverTrouble: false, quota: .device)))
        }
    }

    @Test func unavailableIsRetriedAfterRetryAfterAndThenDelivered() async throws {
        try await FCMHarness.run { harness in
            harness.server.script(token: "later", [.unavailable(retryAfterSeconds: 1), .internalError])
            let started = ContinuousClock.now
            let (response, attempts) = try await harness.deliver(try FCMHarness.request("later"))
            #expect(response.decision == .delivered)
            #expect(attempts == 3)
            #expect(started.duration(to: .now) >= .seconds(1))
            #expect(harness.server.deliveredCount(token: "later") == 1)
            #expect(harness.server.statusCounts()[503] == 1)
            #expect(harness.server.statusCounts()[500] == 1)
        }
    }

    @Test func everyRequestHasADeadline() async throws {
        try await FCMHarness.run { harness in
            _ = try await harness.send(try FCMHarness.request("warm-up"))
            harness.server.setFaults(MockFCMFaults(latency: .seconds(2)))
            let started = ContinuousClock.now
            await #expect {
                _ = try await harness.send(try FCMHarness.request("slow"), timeout: .milliseconds(300))
            } throws: { error in
                (error as? TransportError)?.isDeadlineExceeded == true
            }
            #expect(started.duration(to: .now) < .seconds(1))
        }
    }

    @Test func anAccessTokenThatExpiresMidRunIsRefreshedOnceWithNoFailedNotification() async throws {
        try await FCMHarness.run { harness in
            _ = try await harness.send(try FCMHarness.request("first"))
            #expect(harness.server.tokenExchangeCount == 1)
            harness.server.expireAccessTokens()
            try await withThrowingTaskGroup(of: FCMResponse.self) { group in
                for index in 0..<30 { group.addTask { try await harness.send(try FCMHarness.request("device-\(index)")) } }
                for try await response in group { #expect(response.decision == .delivered) }
            }
            #expect(harness.server.totalDelivered == 31)
            #expect(harness.server.tokenExchangeCount == 2)
            #expect(harness.server.statusCounts()[401, default: 0] >= 1)
        }
    }

    @Test func aRefusedTokenIsRefreshedAndTheMessageSentOnce() async throws {
        try await FCMHarness.run { harness in
            harness.server.script(token: "device", [.expiredAccessToken])
            let response = try await harness.send(try FCMHarness.request("device"))
            #expect(response.decision == .delivered)
            #expect(response.accessTokenRefreshed)
            #expect(harness.server.deliveredCount(token: "device") == 1)
            #expect(harness.server.tokenExchangeCount == 2)
        }
    }

    @Test func tokensAreRefreshedInTheBackgroundBeforeTheyExpire() async throws {
        let clock = ManualTokenClock()
        // The mock's clock stands still (its tokens never expire, however slow the run): only
        // Herald's schedule, on the clock the test moves, decides when tokens are exchanged.
        let mockNow = MockWallClock.millisecondsSince1970()
        try await FCMHarness.run(
            configure: {
                $0.accessTokenLifetimeSeconds = 2
                $0.wallClockMilliseconds = { mockNow }
            },
            configureClient: { $0.tokenRefreshMargin = .seconds(1) },
            tokenClock: clock
        ) { harness in
            _ = try await harness.send(try FCMHarness.request("device"))
            #expect(harness.server.tokenExchangeCount == 1)
            // Refreshed at half of each 2 s life, with no request in between; never earlier.
            for refreshes in 1...3 {
                clock.advance(by: .milliseconds(999))
                try await Task.sleep(for: .milliseconds(50))
                #expect(harness.server.tokenExchangeCount == refreshes)
                clock.advance(by: .milliseconds(1))
                for _ in 0..<1_000 where harness.server.tokenExchangeCount == refreshes { try await Task.sleep(for: .milliseconds(5)) }
                #expect(harness.server.tokenExchangeCount == 1 + refreshes)
            }
            #expect(harness.client.isReady)
            let response = try await harness.send(try FCMHarness.request("device"))
            #expect(response.decision == .delivered)
            #expect(!response.accessTokenRefreshed)
            #expect(harness.server.statusCounts()[401] == nil)
        }
    }

    /// Issue 49, finding 2: a second Firebase project whose key Google refuses (a minor app's
    /// deleted key) leaves the client ready while another project can send; the refused one is
    /// counted per project (the HeraldFCMTokenRefreshFailing alert).
    @Test func oneProjectWithoutATokenLeavesTheClientReady() async throws {
        let untrusted = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let refused = FCMServiceAccount(
            projectID: "minor-app", privateKeyID: "key-2", privateKeyPEM: untrusted.pkcs8PEMRepresentation,
            clientEmail: "herald@minor-app.iam.gserviceaccount.com", tokenURI: "https://127.0.0.1:1/token")
        try await FCMHarness.run(configureClient: { configuration in
            let port = configuration.baseURL.split(separator: ":").last.map(String.init) ?? ""
            var account = refused
            account.tokenURI = "https://127.0.0.1:\(port)/token"
            configuration.credentials.entries.append(.init(packages: ["com.example.minor"], serviceAccount: account))
        }) { harness in
            #expect(try await harness.send(try FCMHarness.request("device")).decision == .delivered)
            while harness.server.refusedAssertionCount == 0 { try await Task.sleep(for: .milliseconds(10)) }
            #expect(harness.client.isReady, "one project can send")
        }
    }

    /// Issue 49, finding 3: a rotated key Google refuses does not take the project's working
    /// token away: sends go on with it (until it expires) while the new key's exchange is retried.
    @Test func aRefusedRotatedKeyKeepsTheOldTokenWorking() async throws {
        let untrusted = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        try await FCMHarness.run { harness in
            #expect(try await harness.send(try FCMHarness.request("before")).decision == .delivered)
            var rotated = harness.account
            rotated.privateKeyID = "rotated-key"
            rotated.privateKeyPEM = untrusted.pkcs8PEMRepresentation
            try harness.client.updateCredentials(FCMCredentials(fallback: rotated))
            while harness.server.refusedAssertionCount == 0 { try await Task.sleep(for: .milliseconds(10)) }
            let after = try await harness.send(try FCMHarness.request("after"))
            #expect(after.decision == .delivered, "sent with the token of the key before the rotation")
            #expect(harness.client.isReady)
        }
    }

    @Test func anUntrustedKeyGetsNoTokenAndTheSourceIsNotReady() async throws {
        let otherKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        try await FCMHarness.run(signingKey: otherKey) { harness in
            await #expect {
                _ = try await harness.send(try FCMHarness.request("device"))
            } throws: { error in
                (error as? TransportError)?.isAccessTokenUnavailable == true
            }
            #expect(!harness.client.isReady)
            #expect(harness.server.refusedAssertionCount >= 1)
            #expect(harness.server.requestCount(token: "device") == 0)
        }
    }

    @Test func aPackageNoCredentialServesIsNotSent() async throws {
        try await FCMHarness.run(configureClient: { configuration in
            let account = configuration.credentials.fallback!
            configuration.credentials = FCMCredentials(entries: [.init(packages: ["com.example.other"], serviceAccount: account)])
        }) { harness in
            await #expect(throws: FCMNoCredentialError(package: "com.example.shop")) {
                _ = try await harness.send(try FCMHarness.request("device"))
            }
        }
    }

    @Test func goAwayLosesNothingAndRepeatsNothing() async throws {
        let metrics = PrometheusCollectorRegistry()
        try await FCMHarness.run(configure: { $0.faults = MockFCMFaults(goAwayAfterRequests: 7) }, metrics: metrics) { harness in
            try await withThrowingTaskGroup(of: FCMResponse.self) { group in
                // A deadline no loaded run reaches: a request past it may have been delivered,
                // and its retry would repeat it.
                for index in 0..<40 {
                    group.addTask { try await harness.deliver(try FCMHarness.request("device-\(index)"), timeout: .seconds(60)).response }
                }
                for try await response in group { #expect(response.decision == .delivered) }
            }
            for index in 0..<40 { #expect(harness.server.deliveredCount(token: "device-\(index)") == 1) }
            // Each GOAWAY is counted; the pool's gauges read what is open and in flight now.
            harness.client.recordPoolState()
        }
        let text = metrics.emitToString()
        let goAways = text.split(separator: "\n").first { $0.hasPrefix("herald_fcm_goaways_total ") }.flatMap { Int($0.split(separator: " ")[1]) }
        #expect((goAways ?? 0) >= 40 / 7, "\(text)")
        #expect(text.contains("herald_fcm_streams_in_use 0"), "nothing in flight after the answers")
        #expect(text.contains("herald_fcm_connections "))
    }

    @Test func aStaticAccessTokenIsAcceptedForItsProjectOnly() async throws {
        try await FCMHarness.run(configure: { $0.staticAccessTokens = ["bench-token": FCMHarness.projectID, "other-token": "other-project"] }) {
            harness in
            let body = #"{"message":{"token":"device-1","data":{"k":"v"}}}"#
            let (accepted, otherProject, unknown) = (
                try await rawPost(harness, bearer: "bench-token", body: body), try await rawPost(harness, bearer: "other-token", body: body),
                try await rawPost(harness, bearer: "unknown-token", body: body)
            )
            #expect(accepted.status == 200)
            #expect(otherProject.status == 403)
            #expect(unknown.status == 401)
            #expect(harness.server.deliveredCount(token: "device-1") == 1)
        }
    }

    /// POSTs `body` to the send endpoint with `bearer`, outside Herald's validation.
    private func rawPost(_ harness: FCMHarness, bearer: String, body: String) async throws -> FCMResponse {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(harness.caPath))]
        let client = HTTPClient(configuration: HTTPClient.Configuration(tlsConfiguration: tls))
        do {
            var request = HTTPClientRequest(url: "https://127.0.0.1:\(harness.port)/v1/projects/\(FCMHarness.projectID)/messages:send")
            request.method = .POST
            request.headers.add(name: "authorization", value: "Bearer \(bearer)")
            request.body = .bytes(ByteBuffer(string: body))
            let answer = try await client.execute(request, timeout: .seconds(5))
            let bytes = try await answer.body.collect(upTo: 65_536)
            try await client.shutdown()
            return FCMResponse(status: Int(answer.status.code), body: bytes.readableBytesView, retryAfterHeader: nil, nowMilliseconds: 0)
        } catch {
            try? await client.shutdown()
            throw error
        }
    }
}
