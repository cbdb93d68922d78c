import ArgumentParser
import Crypto
import Foundation
import WebPushCore

/// `herald-bench webpush-encrypt`: the CPU of encrypting one Web Push message (RFC 8291) against
/// its floor measured in the same run: the swift-crypto operations no implementation can skip
/// (a P-256 key generation, an ECDH, two HKDF-SHA256 derivations (the input key from the
/// shared secret, then the content key and nonce from one extraction) and one AES-128-GCM seal), each timed alone over the same number of messages.
struct WebPushEncryptionBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webpush-encrypt",
        abstract: "Times Web Push message encryption against the cost of the primitives it needs."
    )

    @Option(help: "Messages per round.")
    var messages = 20_000

    @Option(help: "Rounds; the median is reported.")
    var rounds = 5

    @Option(help: "Plaintext bytes per message.")
    var bytes = 200

    func run() throws {
        let browser = P256.KeyAgreement.PrivateKey()
        let keys = try WebPushSubscriptionKeys(
            p256dh: Base64URL.encode(browser.publicKey.x963Representation), auth: Base64URL.encode([UInt8](repeating: 9, count: 16)))
        let plaintext = [UInt8](repeating: UInt8(ascii: "x"), count: bytes)
        let count = messages
        func perMessage(_ body: () throws -> Void) rethrows -> Double {
            var samples: [Double] = []
            for _ in 0..<rounds {
                let started = ContinuousClock.now
                for _ in 0..<count { try body() }
                let elapsed = started.duration(to: .now)
                samples.append(Double(elapsed.components.attoseconds) / 1e12 / Double(count) + Double(elapsed.components.seconds) * 1e6 / Double(count))
            }
            return samples.sorted()[samples.count / 2]
        }
        var sink = 0
        let herald = try perMessage { sink &+= try WebPushEncryption.encrypt(plaintext, to: keys).count }
        // A fresh key as cheaply as swift-crypto makes one (a random scalar, one base-point
        // multiplication); its `init()` (a FIPS pairwise test, compact-representable keys) beside it.
        let keyGeneration = perMessage { sink &+= WebPushEncryption.ephemeralKey().publicKey.rawRepresentation.count }
        let defaultKeyGeneration = perMessage { sink &+= P256.KeyAgreement.PrivateKey().rawRepresentation.count }
        let sender = P256.KeyAgreement.PrivateKey()
        let ecdh = try perMessage { sink &+= try sender.sharedSecretFromKeyAgreement(with: browser.publicKey).withUnsafeBytes { $0.count } }
        let secret = SymmetricKey(size: .bits256)
        let hkdf = perMessage {
            sink &+= HKDF<SHA256>.deriveKey(inputKeyMaterial: secret, salt: [1, 2, 3], info: [4, 5, 6], outputByteCount: 16).bitCount
        }
        let contentKey = SymmetricKey(size: .bits128)
        let seal = try perMessage { sink &+= try AES.GCM.seal(plaintext, using: contentKey).ciphertext.count }
        let floor = keyGeneration + ecdh + 2 * hkdf + seal
        print("Web Push encryption, \(bytes)-byte plaintext, median of \(rounds) rounds of \(count) messages:")
        print(String(format: "  herald   %.2f µs/message", herald))
        print(
            String(
                format: "  floor    %.2f µs (P-256 key generation %.2f, ECDH %.2f, 2 HKDF-SHA256 %.2f, AES-128-GCM %.2f)", floor, keyGeneration, ecdh,
                2 * hkdf, seal))
        print(String(format: "  herald / floor: %.2f  (checksum %d)", herald / floor, sink & 1))
        print(String(format: "  swift-crypto's P256.KeyAgreement.PrivateKey(): %.2f µs/key", defaultKeyGeneration))
    }
}
