import Crypto
import Foundation
import Testing
import WebPushCore

/// Web Push's message encryption against RFC 8291's worked example, the checks a subscription
/// passes before Herald would connect anywhere, and VAPID tokens a push service verifies.
@Suite struct WebPushCoreTests {
    /// RFC 8291 Appendix A: the user agent's keys, the sender's fixed key pair and salt, and the
    /// body the RFC prints, byte for byte.
    @Test func theEncryptedBodyIsRFC8291sWorkedExample() throws {
        let keys = try WebPushSubscriptionKeys(
            p256dh: "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
            auth: "BTBZMqHH6r4Tts7J_aSIgg"
        )
        let sender = try P256.KeyAgreement.PrivateKey(rawRepresentation: try #require(Base64URL.decode("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw")))
        #expect(
            Base64URL.encode(sender.publicKey.x963Representation)
                == "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8")
        let body = try WebPushEncryption.encrypt(
            Array("When I grow up, I want to be a watermelon".utf8), to: keys, senderKey: sender,
            salt: try #require(Base64URL.decode("DGv6ra1nlYgDCS1FRnbzlw")))
        #expect(
            Base64URL.encode(body)
                == "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        )
    }

    /// Two messages never share a key or a salt (AES-GCM breaks when they do).
    @Test func everyMessageHasItsOwnKeyAndSalt() throws {
        let browser = P256.KeyAgreement.PrivateKey()
        let keys = try WebPushSubscriptionKeys(
            p256dh: Base64URL.encode(browser.publicKey.x963Representation), auth: Base64URL.encode([UInt8](repeating: 7, count: 16)))
        let first = try WebPushEncryption.encrypt(Array("same".utf8), to: keys)
        let second = try WebPushEncryption.encrypt(Array("same".utf8), to: keys)
        #expect(first.prefix(16) != second.prefix(16), "salt")
        #expect(first[21..<86] != second[21..<86], "sender key")
        #expect(first.count == 86 + 4 + 1 + 16)
        #expect(throws: WebPushEncryptionError.plaintextTooLarge) {
            try WebPushEncryption.encrypt([UInt8](repeating: 0x61, count: WebPushEncryption.maximumPlaintextBytes + 1), to: keys)
        }
        #expect(try WebPushEncryption.encrypt([UInt8](repeating: 0x61, count: WebPushEncryption.maximumPlaintextBytes), to: keys).count == 4096)
    }

    /// A message's key pair made from a random scalar is a working P-256 pair (its ECDH with a
    /// browser's key agrees with the browser's), and every call makes another.
    @Test func anEphemeralKeyIsAWorkingPairAndNeverRepeats() throws {
        let browser = P256.KeyAgreement.PrivateKey()
        let keys = (0..<64).map { _ in WebPushEncryption.ephemeralKey() }
        #expect(Set(keys.map(\.rawRepresentation)).count == 64)
        for key in keys.prefix(4) {
            let ours = try key.sharedSecretFromKeyAgreement(with: browser.publicKey)
            let theirs = try browser.sharedSecretFromKeyAgreement(with: key.publicKey)
            #expect(ours == theirs)
        }
    }

    static let p256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"

    @Test func aSubscriptionOnAnAllowedHostIsAccepted() throws {
        let apple = try WebPushSubscription(
            endpoint: "https://web.push.apple.com/QGuQyavXutnMH", p256dh: Self.p256dh, auth: Self.auth, allowing: .standard)
        #expect(apple.origin == "https://web.push.apple.com")
        let mock = try WebPushSubscription(
            endpoint: "https://127.0.0.1:8443/push/abc", p256dh: Self.p256dh, auth: Self.auth, allowing: WebPushHostAllowList(["127.0.0.1"]))
        #expect(mock.origin == "https://127.0.0.1:8443")
    }

    /// Each refusal, before anything could connect.
    @Test(arguments: [
        ("http://fcm.googleapis.com/fcm/send/x", p256dh, auth, WebPushSubscriptionError.endpointNotHTTPS),
        ("https://user@fcm.googleapis.com/fcm/send/x", p256dh, auth, .endpointNotHTTPS),
        ("https://fcm.googleapis.com/" + String(repeating: "a", count: 2048), p256dh, auth, .endpointTooLong),
        ("https://169.254.169.254/latest/meta-data", p256dh, auth, .hostNotAllowed("169.254.169.254")),
        ("https://push.apple.com/x", p256dh, auth, .hostNotAllowed("push.apple.com")),
        ("https://evilpush.apple.com.example/x", p256dh, auth, .hostNotAllowed("evilpush.apple.com.example")),
        ("https://fcm.googleapis.com/fcm/send/x", "BA" + String(repeating: "A", count: 85), auth, .badP256DH),
        ("https://fcm.googleapis.com/fcm/send/x", String(p256dh.dropLast(4)), auth, .badP256DH),
        ("https://fcm.googleapis.com/fcm/send/x", p256dh, "BTBZMqHH6r4Tts7J_aSI", .badAuth),
    ])
    func aSubscriptionHeraldCannotUseIsRefused(endpoint: String, p256dh: String, auth: String, refusal: WebPushSubscriptionError) {
        #expect(throws: refusal) { try WebPushSubscription(endpoint: endpoint, p256dh: p256dh, auth: auth, allowing: .standard) }
    }

    /// The token verifies with the public key the header names, for the endpoint's origin, and
    /// is reused until an hour before it expires.
    @Test func vapidTokensVerifyAndAreCachedPerOrigin() throws {
        let key = P256.Signing.PrivateKey()
        let signer = VAPIDSigner(key: key, subject: "mailto:ops@example.com")
        let now: Int64 = 1_795_000_000
        let header = try signer.authorization(origin: "https://web.push.apple.com", nowSeconds: now)
        let parts = header.split(separator: " ")
        #expect(parts.first == "vapid")
        let token = String(try #require(parts.dropFirst().first).dropFirst(2).dropLast())
        #expect(String(try #require(parts.last).dropFirst(2)) == Base64URL.encode(key.publicKey.x963Representation))
        let segments = token.split(separator: ".")
        #expect(segments.count == 3)
        let claimBytes = try #require(Base64URL.decode(segments[1]))
        let claims = try #require(try JSONSerialization.jsonObject(with: Data(claimBytes)) as? [String: Any])
        #expect(claims["aud"] as? String == "https://web.push.apple.com")
        #expect(claims["sub"] as? String == "mailto:ops@example.com")
        let expiry = try #require(claims["exp"] as? Int)
        #expect(Int64(expiry) > now && Int64(expiry) <= now + 24 * 3600)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Base64URL.decode(segments[2])))
        #expect(key.publicKey.isValidSignature(signature, for: Array("\(segments[0]).\(segments[1])".utf8)))

        #expect(try signer.authorization(origin: "https://web.push.apple.com", nowSeconds: now + 3600) == header)
        #expect(try signer.authorization(origin: "https://fcm.googleapis.com", nowSeconds: now) != header)
        #expect(try signer.authorization(origin: "https://web.push.apple.com", nowSeconds: Int64(expiry) - 3599) != header, "renewed")
    }
}
