import PushStores
import APNSCore
import Crypto
import Foundation
import MockAPNS
import MockServerSupport
import PushPipeline
import Testing

@testable import APNSHTTP2

/// Herald's sender (``RetryingSender`` over ``APNSHTTP2Client``) against the mock APNs over
/// real TLS, with the mock's faults switched on.
@Suite("Sender against a faulty mock APNs", .timeLimit(.minutes(5)))
struct SenderAgainstMockTests {
    static let keyID = "KEY1234567"
    static let teamID = "TEAM123456"
    static let signingKey = P256.Signing.PrivateKey()
    static let tokenAuthentication = APNSClientConfiguration.Authentication.token(
        ProviderTokenCredentials(keyID: keyID, teamID: teamID, privateKey: signingKey)
    )

    /// Token mode: the mock verifies provider tokens signed with `signingKey`.
    static func tokenMock(maxConcurrentStreams: Int = 100, faults: MockAPNSFaults) -> MockAPNSConfiguration {
        MockAPNSConfiguration(
            providerKeys: [keyID: signingKey.publicKey],
            teamID: teamID,
            maxConcurrentStreams: maxConcurrentStreams,
            requestLogLimit: 0,
            faults: faults
        )
    }

    /// Short backoffs and a light load-shedding gate so faulty runs finish quickly, and enough
    /// attempts that 40 % faults cannot exhaust them (0.4^30 per notification).
    static let patientPolicy = RetryPolicy(
        maxAttempts: 30,
        deliveryDeadline: .seconds(240),
        requestTimeout: .seconds(30),
        initialBackoff: .milliseconds(5),
        maximumBackoff: .milliseconds(100),
        loadShedding: LoadSheddingPolicy(
            initialPause: .milliseconds(2),
            maximumPause: .milliseconds(40),
            halfLife: .milliseconds(200)
        )
    )

    @Test(
        "5,000 notifications through 20 % 429, 20 % 503 and GOAWAY every 500 requests: all delivered once",
        arguments: [false, true]
    )
    func everyNotificationDeliveredExactlyOnceDespiteFaults(batched: Bool) async throws {
        // A debug build (a plain `swift test`, every suite at once) sends a fifth.
        #if DEBUG
        let count = 1000
        #else
        let count = 5000
        #endif
        let faults = MockAPNSFaults(
            tooManyRequestsFraction: 0.2,
            serviceUnavailableFraction: 0.2,
            goAwayAfterRequests: 500,
            oneStreamUntilFirstSuccess: true,
            seed: 20_261_122
        )
        try await MockHarness.run(
            mock: Self.tokenMock(faults: faults),
            authentication: Self.tokenAuthentication,
            configure: { $0.connectionsPerEndpoint = 2 }
        ) { harness in
            let sender = RetryingSender(client: harness.client, policy: Self.patientPolicy)
            let outcomes = try await MockHarness.deliverAll(count, window: 400, sender: sender, batched: batched)

            #expect(outcomes.allSatisfy { $0.status == .delivered && $0.apnsStatus == 200 })
            let server = harness.server
            #expect(server.totalAcceptedPushes == count)
            #expect(server.repeatedAPNSIDCount == 0)
            let tokensNotPushedOnce = (0..<count).filter { server.pushCount(token: MockHarness.deviceToken($0)) != 1 }
            #expect(tokensNotPushedOnce.isEmpty)

            // The faults really happened, and attempts report them.
            let statuses = server.statusCounts()
            #expect(Set(statuses.keys) == [200, 429, 503])
            #expect(statuses[429, default: 0] > count / 10)
            #expect(statuses[503, default: 0] > count / 10)
            let streams = server.streamStatistics()
            #expect(streams.goAwaysSent >= count / 500)
            let answered = statuses.values.reduce(0, +)
            let attempts = outcomes.map(\.attempts)
            // Every answered request was one attempt; GOAWAY-refused streams were attempts too.
            #expect(attempts.reduce(0, +) >= answered)
            #expect(attempts.filter { $0 > 1 }.count > count / 5)
            #expect(attempts.max()! <= Self.patientPolicy.maxAttempts)
        }
    }

    /// Apple's rule, enforced by the server: SETTINGS_MAX_CONCURRENT_STREAMS is 1 until a request
    /// succeeded, then a new SETTINGS frame raises it. Certificate connections have no rule of
    /// their own in the client, so the server's limit alone holds them to one stream.
    @Test("a stream limit of 1 raised after the first success is followed", arguments: [false, true])
    func followsTheStreamLimitRaisedAfterTheFirstSuccess(certificateAuthentication: Bool) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var mock = Self.tokenMock(maxConcurrentStreams: 20, faults: MockAPNSFaults(oneStreamUntilFirstSuccess: true))
        var authentication = Self.tokenAuthentication
        if certificateAuthentication {
            let files = try ClientCertificateFiles.generate(in: directory)
            mock.providerKeys = [:]
            mock.clientCertificateAuthorityPath = files.caPath
            authentication = .certificate(pemCertificatePath: files.certificatePath, pemPrivateKeyPath: files.privateKeyPath)
        }
        try await MockHarness.run(
            mock: mock,
            authentication: authentication,
            configure: { $0.connectionsPerEndpoint = 1 }
        ) { harness in
            let sender = RetryingSender(client: harness.client, policy: Self.patientPolicy)
            let outcomes = try await MockHarness.deliverAll(200, window: 200, sender: sender)
            #expect(outcomes.allSatisfy { $0.status == .delivered && $0.attempts == 1 })

            let streams = harness.server.streamStatistics()
            #expect(streams.peakConcurrentStreamsBeforeFirstSuccess == 1)
            #expect(streams.peakConcurrentStreamsAfterFirstSuccess > 1)
            #expect(streams.peakConcurrentStreamsAfterFirstSuccess <= 20)
            let pool = harness.client.poolSnapshot(.production)
            #expect(pool.liveConnections == 1)
            #expect((2...20).contains(pool.peakStreamsPerConnection))
            #expect(harness.server.statusCounts() == [200: 200])
        }
    }

    @Test("latency above the request timeout trips the deadline; the retry delivers, once", arguments: [false, true])
    func deadlineTripsAndTheRetryDelivers(batched: Bool) async throws {
        let faults = MockAPNSFaults(latency: .init(fixed: .seconds(4), scope: .firstRequestPerToken))
        var impatientPolicy = Self.patientPolicy
        impatientPolicy.requestTimeout = .seconds(1)
        let policy = impatientPolicy
        try await MockHarness.run(mock: Self.tokenMock(faults: faults), authentication: Self.tokenAuthentication) {
            harness in
            // Open and verify the connection first, so the timed attempts below measure only the latency.
            let warmUp = try await harness.client.send(
                MockHarness.request(10_000),
                environment: .production,
                deadline: .now + .seconds(30)
            )
            #expect(warmUp.status == 200)

            let sender = RetryingSender(client: harness.client, policy: policy)
            let started = ContinuousClock.now
            let outcomes = try await MockHarness.deliverAll(20, window: 20, sender: sender, batched: batched)
            #expect(outcomes.allSatisfy { $0.status == .delivered })
            #expect(outcomes.allSatisfy { $0.attempts >= 2 })
            // Far less than the 4 s latency a waiting client would have seen per notification.
            #expect(started.duration(to: .now) < .seconds(4))

            let server = harness.server
            for index in 0..<20 {
                #expect(server.pushCount(token: MockHarness.deviceToken(index)) == 1)
            }
            #expect(server.repeatedAPNSIDCount == 0)
            // Every timed-out attempt was reset by the client and never processed by the mock.
            let timedOut = outcomes.map(\.attempts).reduce(0, +) - 20
            try await waitUntil { server.streamStatistics().unansweredRequests == timedOut }
            #expect(server.statusCounts() == [200: 21])
        }
    }

    @Test("certificate authentication with PEM files and with PKCS#12 over mutual TLS")
    func certificateAuthenticationWorks() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files = try ClientCertificateFiles.generate(in: directory)
        let mock = MockAPNSConfiguration(clientCertificateAuthorityPath: files.caPath)
        let policy = RetryPolicy(maxAttempts: 2, initialBackoff: .milliseconds(1), loadShedding: .disabled)

        let pem = APNSClientConfiguration.Authentication.certificate(
            pemCertificatePath: files.certificatePath,
            pemPrivateKeyPath: files.privateKeyPath
        )
        try await MockHarness.run(mock: mock, authentication: pem) { harness in
            let sender = RetryingSender(client: harness.client, policy: policy)
            let outcome = try await sender.deliver(MockHarness.request(1), environment: .production, consumedAt: .now)
            #expect(outcome.status == .delivered)
            let received = try #require(harness.server.receivedRequests().last)
            #expect(received.header("authorization") == nil)
        }

        // PKCS#12 (the .p12 Apple's portal exports), bundled by openssl when it is installed.
        let p12Path = try files.exportPKCS12(to: directory.path("client.p12"), password: "s3cret")
        if let p12Path {
            let pkcs12 = APNSClientConfiguration.Authentication.certificate(pkcs12Path: p12Path, password: "s3cret")
            try await MockHarness.run(mock: mock, authentication: pkcs12) { harness in
                let sender = RetryingSender(client: harness.client, policy: policy)
                let outcome = try await sender.deliver(
                    MockHarness.request(2),
                    environment: .production,
                    consumedAt: .now
                )
                #expect(outcome.status == .delivered)
            }

            // A wrong password is a configuration error that names the file, not the password.
            #expect {
                _ = try APNSHTTP2Client(
                    configuration: APNSClientConfiguration(
                        authentication: .certificate(pkcs12Path: p12Path, password: "wrong"),
                        production: .init(host: "127.0.0.1", port: 9)
                    ),
                    logger: MockHarness.logger
                )
            } throws: { error in
                let message = "\(error)"
                return error is APNSClientConfigurationError && message.contains("client.p12")
                    && !message.contains("wrong")
            }
        } else {
            Issue.record("openssl is not installed: the PKCS#12 case was not tested")
        }

        // No client certificate, or one from another CA: the handshake fails and nothing is sent.
        let stranger = try ClientCertificateFiles.generate(in: directory, name: "stranger")
        let refused: [APNSClientConfiguration.Authentication] = [
            Self.tokenAuthentication,
            .certificate(pemCertificatePath: stranger.certificatePath, pemPrivateKeyPath: stranger.privateKeyPath),
        ]
        for authentication in refused {
            try await MockHarness.run(mock: mock, authentication: authentication) { harness in
                let sender = RetryingSender(client: harness.client, policy: policy)
                let outcome = try await sender.deliver(
                    MockHarness.request(3),
                    environment: .production,
                    consumedAt: .now
                )
                #expect(outcome.status == .failed)
                #expect(outcome.apnsStatus == nil)
                #expect(harness.server.statusCounts().isEmpty)
            }
        }
    }
}

/// Polls `condition` every 10 ms for up to 10 s.
func waitUntil(_ condition: @Sendable () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("condition not met within 10 s")
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}
