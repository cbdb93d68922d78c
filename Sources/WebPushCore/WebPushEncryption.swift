public import Crypto

/// Message encryption for Web Push (RFC 8291 over RFC 8188's `aes128gcm`): one record, a fresh
/// P-256 key pair and 16-byte salt per message unless a test fixes them.
///
/// The key pair is made from a random scalar (``ephemeralKey()``), not swift-crypto's
/// `P256.KeyAgreement.PrivateKey()`, which also runs FIPS' pairwise-consistency test (an ECDSA
/// signature and its verification) and draws again until the public key is compact-representable
/// (half the draws): neither is part of RFC 8291, and together they were most of a message's CPU
/// (BENCHMARKS.md, "Web Push encryption").
public enum WebPushEncryption {
    /// The record size written in the header: one record of at most 4,096 bytes.
    public static let recordSize: UInt32 = 4096
    /// The most plaintext one 4,096-byte record carries: 4,096 less the 86-byte header, the
    /// 16-byte tag and the 1-byte padding delimiter.
    public static let maximumPlaintextBytes = 3993

    /// The request body that carries `plaintext` to the subscription whose keys are `keys`:
    /// `salt(16) rs(4) idlen(1) as_public(65)`, then the ciphertext and its tag.
    ///
    /// - Parameters:
    ///   - senderKey: the ephemeral key pair (a new one per message; fixed only by tests).
    ///   - salt: 16 random bytes (new per message; fixed only by tests).
    /// - Throws: ``WebPushEncryptionError/plaintextTooLarge`` above ``maximumPlaintextBytes``.
    public static func encrypt(
        _ plaintext: some Collection<UInt8>,
        to keys: WebPushSubscriptionKeys,
        senderKey: P256.KeyAgreement.PrivateKey = ephemeralKey(),
        salt: [UInt8] = randomSalt()
    ) throws -> [UInt8] {
        guard plaintext.count <= maximumPlaintextBytes else { throw WebPushEncryptionError.plaintextTooLarge }
        precondition(salt.count == 16, "RFC 8188: the salt is 16 bytes")
        let senderPublic = Array(senderKey.publicKey.x963Representation)
        let shared = try senderKey.sharedSecretFromKeyAgreement(with: keys.publicKey)
        // IKM = HKDF(salt: auth, ikm: ECDH, info: "WebPush: info" 0x00 ua_public as_public, 32)
        let keyInfo = Array("WebPush: info".utf8) + [0] + keys.p256dh + senderPublic
        let inputKey = shared.hkdfDerivedSymmetricKey(using: SHA256.self, salt: keys.auth, sharedInfo: keyInfo, outputByteCount: 32)
        // CEK and NONCE expand one pseudo-random key extracted with the message's salt.
        let pseudoRandomKey = HKDF<SHA256>.extract(inputKeyMaterial: inputKey, salt: salt)
        let contentKey = HKDF<SHA256>.expand(pseudoRandomKey: pseudoRandomKey, info: Array("Content-Encoding: aes128gcm".utf8) + [0], outputByteCount: 16)
        let nonce = HKDF<SHA256>.expand(pseudoRandomKey: pseudoRandomKey, info: Array("Content-Encoding: nonce".utf8) + [0], outputByteCount: 12)
        let sealed = try AES.GCM.seal(
            Array(plaintext) + [2], using: contentKey, nonce: try AES.GCM.Nonce(data: nonce.withUnsafeBytes { Array($0) }))
        var body = salt
        body.reserveCapacity(86 + plaintext.count + 17)
        withUnsafeBytes(of: recordSize.bigEndian) { body.append(contentsOf: $0) }
        body.append(UInt8(senderPublic.count))
        body += senderPublic
        body += sealed.ciphertext
        body += sealed.tag
        return body
    }

    /// A fresh P-256 key pair for one message: a scalar of 32 bytes from the system's random
    /// number generator (drawn again in the rare case, about 2^-32, that it is zero or not below
    /// the group's order, which swift-crypto refuses), and its public key, one multiplication of
    /// the base point.
    public static func ephemeralKey() -> P256.KeyAgreement.PrivateKey {
        var generator = SystemRandomNumberGenerator()
        while true {
            let scalar = (0..<4).flatMap { _ in withUnsafeBytes(of: generator.next() as UInt64) { Array($0) } }
            if let key = try? P256.KeyAgreement.PrivateKey(rawRepresentation: scalar) { return key }
        }
    }

    /// 16 bytes from the system's random number generator.
    public static func randomSalt() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<16).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }
}

/// Why a message cannot be encrypted.
public enum WebPushEncryptionError: Error, Sendable, Hashable {
    /// More than ``WebPushEncryption/maximumPlaintextBytes`` of plaintext (result reason
    /// `payload_too_large`).
    case plaintextTooLarge
}
