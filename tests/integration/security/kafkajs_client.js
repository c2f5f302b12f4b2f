// KafkaJS against a SASL_SSL listener, run by test_kafkajs.py:
//   node kafkajs_client.js '<json settings>'      (NODE_PATH names the kafkajs install)
// Produces and consumes one message per SASL user given, then creates, describes and deletes
// an ACL with the admin's client. Prints one JSON object: what each step saw.
'use strict'
const fs = require('fs')
const {
  Kafka,
  logLevel,
  AclResourceTypes,
  AclOperationTypes,
  AclPermissionTypes,
  ResourcePatternTypes,
} = require('kafkajs')

const settings = JSON.parse(process.argv[2])
const ca = [fs.readFileSync(settings.ca, 'utf-8')]

function client(login) {
  return new Kafka({
    clientId: `kafkajs-${login.mechanism}`,
    brokers: [settings.bootstrap],
    ssl: { ca },
    sasl: { mechanism: login.mechanism, username: login.username, password: login.password },
    logLevel: logLevel.NOTHING,
    retry: { retries: 3 },
  })
}

async function roundTrip(login, topic) {
  const kafka = client(login)
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, messages: [{ value: `from ${login.mechanism}` }] })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `g-${topic}` })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const values = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`nothing consumed from ${topic}`)), 30000)
    consumer.run({
      eachMessage: async ({ message }) => {
        clearTimeout(timer)
        resolve([message.value.toString()])
      },
    })
  })
  await consumer.disconnect()
  return values
}

async function acls(admin, topic) {
  const binding = {
    resourceType: AclResourceTypes.TOPIC,
    resourceName: topic,
    resourcePatternType: ResourcePatternTypes.LITERAL,
    principal: 'User:kafkajs-reader',
    host: '*',
    operation: AclOperationTypes.READ,
    permissionType: AclPermissionTypes.ALLOW,
  }
  const filter = { ...binding, operation: AclOperationTypes.ANY, permissionType: AclPermissionTypes.ANY }
  const created = await admin.createAcls({ acl: [binding] })
  const described = await admin.describeAcls(filter)
  const deleted = await admin.deleteAcls({ filters: [filter] })
  const after = await admin.describeAcls(filter)
  return { created, described: described.resources, deleted: deleted.filterResponses, after: after.resources }
}

async function main() {
  const result = { roundTrips: {} }
  const admin = client(settings.admin).admin()
  await admin.connect()
  try {
    for (const login of settings.logins) {
      const topic = `kafkajs-${login.mechanism}-${settings.suffix}`
      await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true })
      result.roundTrips[login.mechanism] = await roundTrip(login, topic)
    }
    result.acls = await acls(admin, `kafkajs-acl-${settings.suffix}`)
  } finally {
    await admin.disconnect()
  }
  process.stdout.write(JSON.stringify(result))
}

main().catch((error) => {
  process.stderr.write(`${error.name}: ${error.message}\n${error.stack}\n`)
  process.exit(1)
})
