import APNSCore
import Crypto
import Foundation
import MockAPNS
import Testing

@testable import APNSHTTP2

/// Several apps and teams in one client: each request uses the credential of its bundle ID.
@Suite("Credentials chosen by topic", .timeLimit(.minutes(2)))
struct CredentialRoutingTests {
    static let shopKey = P256.Signing.PrivateKey()
    static let otherTeamKey = P256.Signing.PrivateKey()
    static let shop = ProviderTokenCredentials(keyID: "SHOPKEY001", teamID: "TEAMSHOP01", privateKey: shopKey)
    static let otherTeam = ProviderTokenCredentials(keyID: "OTHERKEY01", teamID: "TEAMOTHER1", privateKey: otherTeamKey)

    /// A mock that knows both teams' keys (and checks no team id, as the teams differ).
    static var mock: MockAPNSConfiguration {
        MockAPNSConfiguration(providerKeys: ["SHOPKEY001": shopKey.publicKey, "OTHERKEY01": otherTeamKey.publicKey])
    }

    /// The `kid` in the JWT header of a received request's `authorization`.
    static func keyID(of request: MockAPNSServer.ReceivedRequest) -> String? {
        guard let authorization = request.header("authorization"), authorization.hasPrefix("bearer "),
            let header = authorization.dropFirst("bearer ".count).split(separator: ".").first,
            let json = Base64URL.decode(header),
            let object = try? JSONSerialization.jsonObject(with: Data(json)) as? [String: Any]
        else { return nil }
        return object["kid"] as? String
    }

    @Test func eachBundleIDUsesItsCredentialWhateverThePushType() async throws {
        try await MockHarness.run(
            mock: Self.mock,
            authentication: .token(Self.shop),
            configure: { $0.credentialsByTopic = ["com.other.app": .token(Self.otherTeam)] }
        ) { harness in
            let client = harness.client
            #expect(client.credentialCount == 2)
            let requests = [
                MockHarness.request(1, topic: "com.example.shop"),
                MockHarness.request(2, topic: "com.other.app"),
                MockHarness.request(3, topic: "com.other.app.voip", pushType: .voip),
                MockHarness.request(4, topic: "com.other.app.push-type.liveactivity", pushType: .liveactivity),
                MockHarness.request(5, topic: "com.unlisted.app"),
            ]
            for request in requests {
                let response = try await client.send(request, environment: .production, deadline: .now + .seconds(30))
                #expect(response.status == 200)
            }
            let keyIDsByToken = Dictionary(
                uniqueKeysWithValues: harness.server.receivedRequests().map { ($0.token, Self.keyID(of: $0)) }
            )
            #expect(keyIDsByToken[MockHarness.deviceToken(1)] == "SHOPKEY001")
            #expect(keyIDsByToken[MockHarness.deviceToken(2)] == "OTHERKEY01")
            #expect(keyIDsByToken[MockHarness.deviceToken(3)] == "OTHERKEY01")
            #expect(keyIDsByToken[MockHarness.deviceToken(4)] == "OTHERKEY01")
            #expect(keyIDsByToken[MockHarness.deviceToken(5)] == "SHOPKEY001")
            // One pool per credential: each has its own connection.
            #expect(client.poolSnapshot(.production).liveConnections == 1)
            #expect(client.poolSnapshot(.production, topic: "com.other.app").liveConnections == 1)
        }
    }

    @Test func topicsSharingACredentialShareItsConnections() async throws {
        try await MockHarness.run(
            mock: Self.mock,
            authentication: .token(Self.shop),
            configure: {
                $0.credentialsByTopic = [
                    "com.other.app": .token(Self.otherTeam),
                    "com.other.app2": .token(Self.otherTeam),
                    "com.example.shop.clip": .token(Self.shop),
                ]
            }
        ) { harness in
            #expect(harness.client.credentialCount == 2)
            for (index, topic) in ["com.other.app", "com.other.app2", "com.example.shop.clip"].enumerated() {
                let response = try await harness.client.send(
                    MockHarness.request(index, topic: topic),
                    environment: .production,
                    deadline: .now + .seconds(30)
                )
                #expect(response.status == 200)
            }
            #expect(harness.client.poolSnapshot(.production, topic: "com.other.app2").liveConnections == 1)
            #expect(harness.client.poolSnapshot(.production).liveConnections == 1)
        }
    }

    @Test func aRejectedCredentialDoesNotAffectOtherTopics() async throws {
        let unknownKey = ProviderTokenCredentials(
            keyID: "REVOKED001",
            teamID: "TEAMREVOKE",
            privateKey: P256.Signing.PrivateKey()
        )
        try await MockHarness.run(
            mock: Self.mock,
            authentication: .token(Self.shop),
            configure: { $0.credentialsByTopic = ["com.revoked.app": .token(unknownKey)] }
        ) { harness in
            let revoked = try await harness.client.send(
                MockHarness.request(1, topic: "com.revoked.app"),
                environment: .production,
                deadline: .now + .seconds(30)
            )
            #expect(revoked.status == 403)
            #expect(revoked.reason == .invalidProviderToken)
            let healthy = try await harness.client.send(
                MockHarness.request(2, topic: "com.example.shop"),
                environment: .production,
                deadline: .now + .seconds(30)
            )
            #expect(healthy.status == 200)
        }
    }

    @Test func replacingACredentialWhileRequestsRunLosesAndRepeatsNothing() async throws {
        var mock = Self.mock
        mock.maxConcurrentStreams = 8
        mock.faults = MockAPNSFaults(latency: .init(fixed: .milliseconds(100)))
        try await MockHarness.run(
            mock: mock,
            authentication: .token(Self.shop),
            configure: { $0.connectionsPerEndpoint = 1 }
        ) { harness in
            let client = harness.client
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<40 {
                    group.addTask {
                        try await client.send(MockHarness.request(index), environment: .production, deadline: .now + .seconds(30)).status
                    }
                }
                // Streams in flight on the first key's connection and requests queued behind them.
                while client.poolSnapshot(.production).streamsInUse < 2 { try await Task.sleep(for: .milliseconds(2)) }
                #expect(try client.replaceCredentials(default: .token(Self.otherTeam), byTopic: [:]))
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.count == 40)
            #expect(statuses.allSatisfy { $0 == 200 })
            let received = harness.server.receivedRequests()
            #expect(received.count == 40, "nothing sent twice")
            #expect(Set(received.map(\.token)).count == 40, "nothing lost")
            let keyIDs = received.map { Self.keyID(of: $0) }
            #expect(keyIDs.contains("SHOPKEY001"), "requests in flight finished with the old key")
            #expect(keyIDs.contains("OTHERKEY01"), "the rest went with the new one")
            #expect(received.suffix(5).allSatisfy { Self.keyID(of: $0) == "OTHERKEY01" })
            #expect(client.credentialCount == 1)
            #expect(!(try client.replaceCredentials(default: .token(Self.otherTeam), byTopic: [:])), "the same credential again changes nothing")
        }
    }

    @Test func withoutADefaultCredentialAnUnlistedTopicIsNotSent() async throws {
        try await MockHarness.run(
            mock: Self.mock,
            authentication: .token(Self.shop),
            configure: {
                $0.authentication = nil
                $0.credentialsByTopic = ["com.other.app": .token(Self.otherTeam)]
            }
        ) { harness in
            await #expect(throws: APNSNoCredentialError(topic: "com.example.shop")) {
                try await harness.client.send(MockHarness.request(1), environment: .production, deadline: .now + .seconds(30))
            }
            let listed = try await harness.client.send(
                MockHarness.request(2, topic: "com.other.app"),
                environment: .production,
                deadline: .now + .seconds(30)
            )
            #expect(listed.status == 200)
            #expect(harness.server.receivedRequests().map(\.token) == [MockHarness.deviceToken(2)])

            // A credential for the topic added while running serves it from then on.
            try harness.client.replaceCredentials(
                default: nil,
                byTopic: ["com.other.app": .token(Self.otherTeam), "com.example.shop": .token(Self.shop)]
            )
            let added = try await harness.client.send(MockHarness.request(3), environment: .production, deadline: .now + .seconds(30))
            #expect(added.status == 200)
        }
    }

    @Test func concurrentReplacementsLeaveOneWorkingRouting() async throws {
        try await MockHarness.run(mock: Self.mock, authentication: .token(Self.shop)) { harness in
            let client = harness.client
            #expect(try await client.send(MockHarness.request(0), environment: .production, deadline: .now + .seconds(30)).status == 200)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<20 {
                    group.addTask {
                        try client.replaceCredentials(default: .token(index.isMultiple(of: 2) ? Self.otherTeam : Self.shop), byTopic: [:])
                    }
                }
                try await group.waitForAll()
            }
            #expect(client.credentialCount == 1)
            let response = try await client.send(MockHarness.request(1), environment: .production, deadline: .now + .seconds(10))
            #expect(response.status == 200, "a request after the replacements is served, not moved between retired pools")
        }
    }
}
