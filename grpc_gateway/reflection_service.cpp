#include "grpc_gateway/reflection_service.hpp"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>

namespace kvrelay::gateway {

namespace {

namespace reflection = grpc::reflection::v1;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// `file`, then every file it imports, directly or not, each once.
void add_file_and_imports(const FileDescriptor* file, std::set<const FileDescriptor*>& added,
                          reflection::FileDescriptorResponse& out) {
  if (!added.insert(file).second) return;
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out.add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) add_file_and_imports(file->dependency(i), added, out);
}

void set_file(const FileDescriptor* file, reflection::ServerReflectionResponse& response) {
  std::set<const FileDescriptor*> added;
  add_file_and_imports(file, added, *response.mutable_file_descriptor_response());
}

void set_not_found(const std::string& message, reflection::ServerReflectionResponse& response) {
  auto* error = response.mutable_error_response();
  error->set_error_code(grpc::StatusCode::NOT_FOUND);
  error->set_error_message(message);
}

}  // namespace

reflection::ServerReflectionResponse ReflectionService::answer(
    const reflection::ServerReflectionRequest& request) const {
  const DescriptorPool& pool = *DescriptorPool::generated_pool();
  reflection::ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  switch (request.message_request_case()) {
    case reflection::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_)
        response.mutable_list_services_response()->add_service()->set_name(name);
      break;
    case reflection::ServerReflectionRequest::kFileByFilename:
      if (const auto* file = pool.FindFileByName(request.file_by_filename())) {
        set_file(file, response);
      } else {
        set_not_found("file not found: " + request.file_by_filename(), response);
      }
      break;
    case reflection::ServerReflectionRequest::kFileContainingSymbol:
      if (const auto* file = pool.FindFileContainingSymbol(request.file_containing_symbol())) {
        set_file(file, response);
      } else {
        set_not_found("symbol not found: " + request.file_containing_symbol(), response);
      }
      break;
    case reflection::ServerReflectionRequest::kFileContainingExtension: {
      const auto& wanted = request.file_containing_extension();
      const auto* type = pool.FindMessageTypeByName(wanted.containing_type());
      const auto* extension = type == nullptr ? nullptr : pool.FindExtensionByNumber(type, wanted.extension_number());
      if (extension != nullptr) {
        set_file(extension->file(), response);
      } else {
        set_not_found(
            "extension not found: " + wanted.containing_type() + " " + std::to_string(wanted.extension_number()),
            response);
      }
      break;
    }
    case reflection::ServerReflectionRequest::kAllExtensionNumbersOfType:
      if (const auto* type = pool.FindMessageTypeByName(request.all_extension_numbers_of_type())) {
        std::vector<const google::protobuf::FieldDescriptor*> extensions;
        pool.FindAllExtensions(type, &extensions);
        auto* numbers = response.mutable_all_extension_numbers_response();
        numbers->set_base_type_name(type->full_name());
        for (const auto* extension : extensions) numbers->add_extension_number(extension->number());
      } else {
        set_not_found("type not found: " + request.all_extension_numbers_of_type(), response);
      }
      break;
    case reflection::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET: {
      auto* error = response.mutable_error_response();
      error->set_error_code(grpc::StatusCode::UNIMPLEMENTED);
      error->set_error_message("the request names nothing to reflect");
      break;
    }
  }
  return response;
}

grpc::Status ReflectionService::ServerReflectionInfo(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<reflection::ServerReflectionResponse, reflection::ServerReflectionRequest>* stream) {
  reflection::ServerReflectionRequest request;
  while (stream->Read(&request)) {
    if (!stream->Write(answer(request))) break;
  }
  return grpc::Status::OK;
}

}  // namespace kvrelay::gateway
