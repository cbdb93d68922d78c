import Crypto
import Foundation
import Logging
import MockAPNS
import NIOCore
import ServiceLifecycle
import Testing

@Suite("MockAPNSServer", .timeLimit(.minutes(2)))
struct MockAPNSServerTests {
    let signer = ProviderTokenFactory()

    /// Token mode: the signer's key is known and the team id is enforced.
    var tokenModeConfiguration: MockAPNSConfiguration {
        MockAPNSConfiguration(
            providerKeys: [self.signer.keyID: self.signer.privateKey.publicKey],
            teamID: self.signer.teamID
        )
    }

    @Test("a push with a valid provider token is accepted and counted")
    func acceptsValidPush() async throws {
        let token = makeDeviceToken()
        let jwt = try self.signer.token()
        let apnsID = "8f6a1f2e-4b7c-4d8e-9a0b-1c2d3e4f5a6b"
        try await withMockAPNSServer(self.tokenModeConfiguration) { server, port, caPath in
            #expect(FileManager.default.fileExists(atPath: caPath))
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")

            let response = try await client.push(token: token, authorization: jwt, apnsID: apnsID)
            #expect(response.status == 200)
            #expect(response.body.isEmpty)
            #expect(response.apnsID == apnsID)

            #expect(server.pushCount(token: token) == 1)
            #expect(server.pushCount(token: token.uppercased()) == 1)
            #expect(server.totalAcceptedPushes == 1)
            #expect(server.statusCounts() == [200: 1])
            let logged = try #require(server.receivedRequests().first)
            #expect(logged.token == token)
            #expect(logged.status == 200)
            #expect(logged.reason == nil)
            #expect(logged.header("apns-topic") == "com.example.app")
            #expect(logged.header(":method") == "POST")
            #expect(logged.payload == Array(#"{"aps":{"alert":"hi"}}"#.utf8))
        }
    }

    @Test("without an apns-id the answer carries a fresh lowercase UUID")
    func generatesAPNSID() async throws {
        try await withMockAPNSServer { _, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            var seen: Set<String> = []
            for _ in 0..<20 {
                let response = try await client.push(token: makeDeviceToken(), authorization: nil)
                #expect(response.status == 200)
                let apnsID = try #require(response.apnsID)
                #expect(UUID(uuidString: apnsID) != nil)
                #expect(apnsID == apnsID.lowercased())
                let characters = Array(apnsID)
                #expect(characters[14] == "4")  // version 4
                #expect("89ab".contains(characters[19]))  // RFC 4122 variant
                seen.insert(apnsID)
            }
            #expect(seen.count == 20)
        }
    }

    @Test("the certificate verifies for the IP address too, and SETTINGS advertise the stream limit")
    func verifiesIPAddressAndAdvertisesStreams() async throws {
        var configuration = MockAPNSConfiguration()
        configuration.maxConcurrentStreams = 321
        try await withMockAPNSServer(configuration) { _, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: nil)
            let response = try await client.push(token: makeDeviceToken(), authorization: nil)
            #expect(response.status == 200)
            #expect(try await client.advertisedMaxConcurrentStreams.get() == 321)
        }
    }

    @Test("provider token failures answer 403 with Apple's reasons")
    func rejectsBadProviderTokens() async throws {
        let otherSigner = ProviderTokenFactory(keyID: self.signer.keyID, teamID: self.signer.teamID)
        let cases: [(jwt: String?, reason: String)] = [
            (try otherSigner.token(), "InvalidProviderToken"),  // signed by another key
            (nil, "MissingProviderToken"),
            ("not-a-jwt", "InvalidProviderToken"),
            (try self.signer.token(keyID: "UNKNOWNKID"), "InvalidProviderToken"),
            (try self.signer.token(algorithm: "ES384"), "InvalidProviderToken"),
            (try self.signer.token(teamID: "OTHERTEAM0"), "InvalidProviderToken"),
            (try self.signer.token(issuedAt: Date().addingTimeInterval(-61 * 60)), "ExpiredProviderToken"),
        ]
        try await withMockAPNSServer(self.tokenModeConfiguration) { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            for testCase in cases {
                let response = try await client.push(token: makeDeviceToken(), authorization: testCase.jwt)
                #expect(response.status == 403, "\(testCase.reason)")
                #expect(response.reason == testCase.reason)
                #expect(response.apnsID != nil)
            }
            // A valid token still works on the same connection, and is accepted again from the cache.
            let jwt = try self.signer.token()
            #expect(try await client.push(token: makeDeviceToken(), authorization: jwt).status == 200)
            #expect(try await client.push(token: makeDeviceToken(), authorization: jwt).status == 200)
            #expect(server.totalAcceptedPushes == 2)
            #expect(server.statusCounts() == [403: cases.count, 200: 2])
        }
    }

    @Test("a token marked unregistered answers 410 with its timestamp")
    func answersUnregistered() async throws {
        let configuredToken = makeDeviceToken(0x11)
        let runtimeToken = makeDeviceToken(0x22)
        var configuration = MockAPNSConfiguration()
        configuration.unregisteredTokens = [configuredToken: 1_767_225_600_123]
        try await withMockAPNSServer(configuration) { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")

            let first = try await client.push(token: configuredToken.uppercased(), authorization: nil)
            #expect(first.status == 410)
            #expect(first.reason == "Unregistered")
            #expect(first.timestamp == 1_767_225_600_123)

            #expect(try await client.push(token: runtimeToken, authorization: nil).status == 200)
            server.markUnregistered(token: runtimeToken, at: 42)
            let second = try await client.push(token: runtimeToken, authorization: nil)
            #expect(second.status == 410)
            #expect(second.timestamp == 42)
            #expect(server.pushCount(token: runtimeToken) == 1)
            #expect(server.pushCount(token: configuredToken) == 0)
        }
    }

    @Test("method, path and device token are checked first")
    func checksPathAndDeviceToken() async throws {
        try await withMockAPNSServer(self.tokenModeConfiguration) { _, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            let payload = Array(#"{"aps":{}}"#.utf8)

            let zz = try await client.push(token: "zz", authorization: nil)
            #expect(zz.status == 400)
            #expect(zz.reason == "BadDeviceToken")
            #expect(try await client.push(token: "abc", authorization: nil).reason == "BadDeviceToken")
            #expect(try await client.push(token: "", authorization: nil).reason == "MissingDeviceToken")

            let badPath = try await client.send(path: "/3/devices/abcd", payload: payload)
            #expect(badPath.status == 404)
            #expect(badPath.reason == "BadPath")

            let get = try await client.send(method: "GET", path: "/3/device/abcd", payload: [])
            #expect(get.status == 405)
            #expect(get.reason == "MethodNotAllowed")
        }
    }

    @Test("apns-* headers are validated in Apple's order")
    func validatesHeaders() async throws {
        let token = makeDeviceToken()
        let cases: [(topic: String?, pushType: String?, extra: [(String, String)], reason: String)] = [
            (nil, "alert", [], "MissingTopic"),
            ("t", "email", [], "InvalidPushType"),
            ("t", "alert", [("apns-priority", "7")], "BadPriority"),
            ("t", "alert", [("apns-id", "not-a-uuid")], "BadMessageId"),
            ("t", "alert", [("apns-collapse-id", String(repeating: "c", count: 65))], "BadCollapseId"),
            ("t", "alert", [("apns-expiration", "soon")], "BadExpirationDate"),
            ("t", "alert", [("apns-priority", "10"), ("apns-priority", "5")], "DuplicateHeaders"),
        ]
        try await withMockAPNSServer { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            for testCase in cases {
                let response = try await client.push(
                    token: token,
                    authorization: nil,
                    topic: testCase.topic,
                    pushType: testCase.pushType,
                    extraHeaders: testCase.extra
                )
                #expect(response.status == 400, "\(testCase.reason)")
                #expect(response.reason == testCase.reason)
            }
            let accepted = try await client.push(
                token: token,
                authorization: nil,
                extraHeaders: [
                    ("apns-priority", "5"), ("apns-expiration", "0"),
                    ("apns-collapse-id", String(repeating: "c", count: 64)),
                ]
            )
            #expect(accepted.status == 200)
            #expect(server.statusCounts() == [400: cases.count, 200: 1])
            #expect(server.receivedRequests().map(\.reason) == cases.map(\.reason) + [nil])
        }
    }

    @Test("payload size limits: empty, 4096 for alerts, 5120 for voip")
    func enforcesPayloadLimits() async throws {
        let token = makeDeviceToken()
        try await withMockAPNSServer { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")

            let empty = try await client.push(token: token, authorization: nil, payload: [])
            #expect(empty.status == 400)
            #expect(empty.reason == "PayloadEmpty")

            let tooLarge = try await client.push(token: token, authorization: nil, payload: makePayload(size: 4097))
            #expect(tooLarge.status == 413)
            #expect(tooLarge.reason == "PayloadTooLarge")

            #expect(try await client.push(token: token, authorization: nil, payload: makePayload(size: 4096)).status == 200)

            let voip = try await client.push(
                token: token,
                authorization: nil,
                topic: "com.example.app.voip",
                pushType: "voip",
                payload: makePayload(size: 5000)
            )
            #expect(voip.status == 200)
            let voipTooLarge = try await client.push(
                token: token,
                authorization: nil,
                topic: "com.example.app.voip",
                pushType: "voip",
                payload: makePayload(size: 5121)
            )
            #expect(voipTooLarge.status == 413)
            #expect(server.pushCount(token: token) == 2)
            #expect(server.receivedRequests().last?.payload.count == MockAPNSServer.maximumKeptPayloadBytes)
        }
    }

    @Test("bodies beyond a stream's and the connection's flow-control windows are read to the end and answered")
    func returnsFlowControlWindows() async throws {
        // 20 bodies of 600 KB on one connection: each is over nine stream windows (64 KiB), all
        // of them together over the connection's 8 MiB window. Without WINDOW_UPDATEs from the
        // server the client would stall and the test time out.
        let pushes = 20
        try await withMockAPNSServer { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            let reasons = try await withThrowingTaskGroup(of: String?.self) { group in
                for index in 0..<pushes {
                    group.addTask {
                        try await client.push(token: makeDeviceToken(UInt8(index)), authorization: nil, payload: makePayload(size: 600_000)).reason
                    }
                }
                return try await group.reduce(into: [String?]()) { $0.append($1) }
            }
            #expect(reasons == Array(repeating: "PayloadTooLarge", count: pushes))
            #expect(server.statusCounts() == [413: pushes])
            #expect(try await client.push(token: makeDeviceToken(), authorization: nil).status == 200)
        }
    }

    @Test("accepting an apns-id that was accepted before counts as a repeat")
    func detectsRepeatedAPNSID() async throws {
        let apnsID = "11111111-2222-4333-8444-555555555555"
        try await withMockAPNSServer { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")

            #expect(try await client.push(token: makeDeviceToken(), authorization: nil, apnsID: apnsID).status == 200)
            #expect(server.repeatedAPNSIDCount == 0)
            // Same id, different case: still the same notification.
            let again = try await client.push(token: makeDeviceToken(), authorization: nil, apnsID: apnsID.uppercased())
            #expect(again.status == 200)
            #expect(again.apnsID == apnsID.uppercased())
            #expect(server.repeatedAPNSIDCount == 1)
            // Fresh ids and ids without one never count.
            _ = try await client.push(token: makeDeviceToken(), authorization: nil)
            _ = try await client.push(token: makeDeviceToken(), authorization: nil, apnsID: UUID().uuidString.lowercased())
            #expect(server.repeatedAPNSIDCount == 1)

            server.reset()
            #expect(server.repeatedAPNSIDCount == 0)
            #expect(server.totalAcceptedPushes == 0)
            #expect(server.statusCounts().isEmpty)
            #expect(server.receivedRequests().isEmpty)
            _ = try await client.push(token: makeDeviceToken(), authorization: nil, apnsID: apnsID)
            #expect(server.repeatedAPNSIDCount == 0)
        }
    }

    @Test("many concurrent streams over several connections are all answered and counted")
    func servesConcurrentStreams() async throws {
        let jwt = try self.signer.token()
        let connectionCount = 3
        let pushesPerConnection = 200
        try await withMockAPNSServer(self.tokenModeConfiguration) { server, port, caPath in
            var clients: [TestHTTP2Client] = []
            for _ in 0..<connectionCount {
                clients.append(try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost"))
            }
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for (clientIndex, client) in clients.enumerated() {
                    for push in 0..<pushesPerConnection {
                        let token = makeDeviceToken(UInt8((clientIndex * pushesPerConnection + push) % 256))
                        group.addTask { try await client.push(token: token, authorization: jwt).status }
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            for client in clients { await client.close() }
            #expect(statuses.count == connectionCount * pushesPerConnection)
            #expect(statuses.allSatisfy { $0 == 200 })
            #expect(server.totalAcceptedPushes == connectionCount * pushesPerConnection)
            #expect(server.statusCounts() == [200: connectionCount * pushesPerConnection])
        }
    }

    @Test("the request log keeps only the most recent requests")
    func boundsRequestLog() async throws {
        var configuration = MockAPNSConfiguration()
        configuration.requestLogLimit = 3
        try await withMockAPNSServer(configuration) { server, port, caPath in
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            for seed in UInt8(1)...5 {
                _ = try await client.push(token: makeDeviceToken(seed), authorization: nil)
            }
            #expect(server.receivedRequests().map(\.token) == [3, 4, 5].map { makeDeviceToken($0) })
            #expect(server.totalAcceptedPushes == 5)
        }
    }

    @Test("a graceful shutdown from a ServiceGroup stops the server and closes its connections")
    func stopsOnGracefulShutdown() async throws {
        var logger = Logger(label: "mock-apns-tests")
        logger.logLevel = .warning
        let caPath = FileManager.default.temporaryDirectory
            .appendingPathComponent("mock-apns-tests-\(UUID().uuidString)/ca.pem").path
        defer { try? FileManager.default.removeItem(atPath: (caPath as NSString).deletingLastPathComponent) }
        let server = MockAPNSServer(configuration: MockAPNSConfiguration(caCertificatePath: caPath), logger: logger)
        let group = ServiceGroup(services: [server], logger: logger)

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            let port = try await server.listeningPort()
            let client = try await TestHTTP2Client.connect(port: port, caPath: caPath, serverHostname: "localhost")
            #expect(try await client.push(token: makeDeviceToken(), authorization: nil).status == 200)

            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            try await client.channel.closeFuture.get()
        }
        await #expect(throws: MockAPNSServerError.stopped) { try await server.listeningPort() }
        await #expect(throws: MockAPNSServerError.alreadyStarted) { try await server.run() }
    }

    @Test("listeningPort() reports a failure to bind")
    func reportsBindFailure() async throws {
        try await withMockAPNSServer { _, port, _ in
            let second = MockAPNSServer(
                configuration: MockAPNSConfiguration(port: port),
                logger: Logger(label: "mock-apns-tests", factory: { _ in SwiftLogNoOpLogHandler() })
            )
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await #expect(throws: (any Error).self) { try await second.run() } }
                await #expect(throws: (any Error).self) { try await second.listeningPort() }
            }
        }
    }
}
