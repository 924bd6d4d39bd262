#pragma once
// idem's RabbitMQ consumer, on rabbitmq-c. Link the CMake target idem::amqp.

#include "idem/amqp/channel.hpp"
#include "idem/amqp/connection_params.hpp"
#include "idem/amqp/consumer.hpp"
#include "idem/amqp/errors.hpp"
#include "idem/amqp/message.hpp"
#include "idem/amqp/settlement.hpp"
#include "idem/idem.hpp"
